"""Tools with large results, configured by path (``tests.integration.agent_tools_large:<name>``).

Their results are deterministic text (numbered lines), so a test can rebuild what a tool returned and
check that it reached the model whole: any cut, reorder or substitution changes it.
"""

from __future__ import annotations

import threading

__all__ = [
    "CALLS",
    "CHUNK_BYTES",
    "REPORT_BYTES",
    "archive_chunk",
    "chunk_text",
    "full_report",
    "report_text",
]

#: What ``full_report`` returns: 3 MB of text.
REPORT_BYTES = 3 * 1024 * 1024
#: What each ``archive_chunk`` returns: 200 KB of text.
CHUNK_BYTES = 200 * 1024

CALLS: list[tuple[str, object]] = []
_lock = threading.Lock()


def numbered_text(label: str, size: int) -> str:
    """``size`` characters (ASCII, so bytes too) of numbered lines naming ``label``."""
    lines: list[str] = []
    total = 0
    n = 0
    while total < size:
        line = f"{label} line {n:07d}\n"
        lines.append(line)
        total += len(line)
        n += 1
    return "".join(lines)[:size]


def report_text(name: str) -> str:
    """What ``full_report(name)`` returns."""
    return numbered_text(f"report {name}", REPORT_BYTES)


def chunk_text(n: int) -> str:
    """What ``archive_chunk(n)`` returns."""
    return numbered_text(f"archive chunk {n:02d}", CHUNK_BYTES)


async def full_report(name: str) -> str:
    """The whole text of a report (about 3 MB).

    Args:
        name: the report's name.
    """
    with _lock:
        CALLS.append(("full_report", name))
    return report_text(name)


async def archive_chunk(n: int) -> str:
    """One chunk of the archive (about 200 KB of text).

    Args:
        n: the chunk's number, from 0.
    """
    with _lock:
        CALLS.append(("archive_chunk", n))
    return chunk_text(n)
