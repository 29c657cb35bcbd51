"""Fuzz: hostile A2A requests against a real ``harness serve``, counting what must never happen.

What is measured
----------------
One agent (echo model) served by ``harness serve --log-format json`` on the embedded default, in a
child process. ``--cases`` requests (10,000) from a seeded generator, ``--concurrency`` (8) at a
time, over loopback: JSON-RPC envelopes with every method and random, broken or hostile params
(wrong types, huge and negative numbers, deep nesting, lone surrogates, NaN, non-UTF-8 bytes,
truncated JSON, batches, odd ids, wrong or missing Content-Type), HTTP+JSON bodies and query
strings on every route, and a few valid sends. It reports:

* ``5xx``: answers with a status of 500 or more (target 0);
* ``leaks``: answers carrying Python's or a parser's own words (``Traceback``, ``codec``,
  ``invalid literal``, ``object at 0x``, ...; target 0);
* ``hangs``: requests without an answer within ``--timeout`` seconds (target 0);
* the server's RSS before, in the middle and at the end (target: flat), its log size, and how many
  log lines were ERROR or carried a traceback (target 0).

The exit code is 0 whatever the counts (a measurement); 1 when the server could not be started.
Run from the repository root: ``PYTHONPATH=. python bench/fuzz.py`` (``--quick``: 1,000 cases).
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

LEAKS = (
    "Traceback",
    "codec",
    "Expecting",
    "line 1 column",
    "recursion",
    "invalid literal",
    "<method",
    "object at 0x",
    "SystemError",
    "Exception",
    "google._upb",
    'File "',
    "unknown exception",
)
METHODS = (
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "GetExtendedAgentCard",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
)
REST = (
    ("POST", "/message:send"),
    ("POST", "/message:stream"),
    ("POST", "/tasks/{id}:cancel"),
    ("GET", "/tasks/{id}"),
    ("GET", "/tasks"),
    ("GET", "/tasks/{id}:subscribe"),
    ("POST", "/tasks/{id}/pushNotificationConfigs"),
    ("GET", "/extendedAgentCard"),
    ("POST", "/tenant/message:send"),
)
FIELDS = (
    "message",
    "id",
    "pageSize",
    "pageToken",
    "historyLength",
    "statusTimestampAfter",
    "status",
    "contextId",
    "includeArtifacts",
    "configuration",
    "tenant",
    "metadata",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cases:
    """A seeded generator of hostile requests: (method, path, headers, body bytes)."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)

    def value(self, depth: int = 0) -> Any:
        r = self.r
        kinds = ["int", "big", "neg", "float", "str", "bool", "null", "list", "dict"]
        if depth > 3:
            kinds = kinds[:7]
        kind = r.choice(kinds)
        if kind == "int":
            return r.randint(-5, 500)
        if kind == "big":
            return r.choice([2**63, 10**40, -(2**70)])
        if kind == "neg":
            return -r.randint(1, 10**6)
        if kind == "float":
            return r.choice([0.5, 1e308, -1e-9, 3.0])
        if kind == "str":
            return r.choice(
                ["", "x" * r.randint(1, 300), "TASK_STATE_COMPLETED", "\u00e9\u6f22", "../"]
            )
        if kind == "bool":
            return r.random() < 0.5
        if kind == "null":
            return None
        if kind == "list":
            return [self.value(depth + 1) for _ in range(r.randint(0, 3))]
        return {r.choice(FIELDS): self.value(depth + 1) for _ in range(r.randint(0, 3))}

    def message(self) -> Any:
        r = self.r
        message: dict[str, Any] = {
            "messageId": r.choice([f"fz-{r.random()}", self.value()]),
            "role": r.choice(["ROLE_USER", "ROLE_AGENT", 7, None]),
            "parts": r.choice(
                [
                    [{"text": "hello"}],
                    [{"raw": "!!notbase64", "mediaType": "text/plain"}],
                    [{"url": self.value()}],
                    [{"data": self.value()}],
                    self.value(),
                ]
            ),
        }
        if r.random() < 0.3:
            message["taskId"] = self.value()
        if r.random() < 0.3:
            message["contextId"] = self.value()
        return message

    def params(self) -> Any:
        r = self.r
        if r.random() < 0.15:
            return self.value()
        params = {field: self.value() for field in r.sample(FIELDS, r.randint(0, 4))}
        if r.random() < 0.5:
            params["message"] = self.message()
            params["configuration"] = {"returnImmediately": True}
        return params

    def raw(self, text: str) -> bytes:
        """``text`` made worse, sometimes."""
        r = self.r
        choice = r.random()
        if choice < 0.05:
            return text.encode()[: r.randint(0, len(text))]
        if choice < 0.08:
            return b"\xff\xfe" + text.encode()
        if choice < 0.10:
            return b"[" * 40_000
        if choice < 0.12:
            return text.replace('"id": 1', '"id": "\\ud800"').encode()
        if choice < 0.14:
            return b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": NaN}}'
        return text.encode()

    def headers(self) -> dict[str, str]:
        r = self.r
        headers = {"A2A-Version": r.choice(["1.0", "1.0", "0.3", "9"])}
        kind = r.random()
        if kind < 0.85:
            headers["Content-Type"] = "application/json"
        elif kind < 0.95:
            headers["Content-Type"] = r.choice(
                ["text/plain", "application/xml", "", "application/json; charset=latin-1"]
            )
        if r.random() < 0.05:
            headers["Last-Event-ID"] = r.choice(["-1", "abc", "1e9", "3"])
        return headers

    def next(self) -> tuple[str, str, dict[str, str], bytes]:
        r = self.r
        if r.random() < 0.6:
            envelope: dict[str, Any] = {
                "jsonrpc": r.choice(["2.0", "2.0", "2.0", "1.0", 2]),
                "id": r.choice([1, 1, "x", None, 1.5, [1], {"a": 1}, True]),
                "method": r.choice([*METHODS, *METHODS, "", "Nope", 5]),
            }
            if r.random() < 0.9:
                envelope["params"] = self.params()
            if r.random() < 0.03:
                envelope = [envelope, envelope]  # type: ignore[assignment]
            return "POST", "/", self.headers(), self.raw(json.dumps(envelope))
        method, path = r.choice(REST)
        path = path.replace("{id}", r.choice(["nope", "x" * 300, "%00", "a b"]))
        if method == "GET":
            query = "&".join(
                f"{k}={v}"
                for k, v in (
                    (r.choice(FIELDS), r.choice(["1", "-4", "abc", "true", "1e3", ""]))
                    for _ in range(r.randint(0, 3))
                )
            )
            return "GET", f"{path}?{query}" if query else path, self.headers(), b""
        return "POST", path, self.headers(), self.raw(json.dumps(self.params()))


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def run(options: argparse.Namespace, url: str, pid: int) -> dict[str, Any]:
    cases = Cases(options.seed)
    counts = {"sent": 0, "5xx": 0, "leaks": 0, "hangs": 0, "transport": 0}
    examples: dict[str, str] = {}
    rss = {"before": rss_kib(pid)}
    limits = httpx.Limits(max_connections=options.concurrency + 2)
    lock = anyio.Lock()
    async with httpx.AsyncClient(base_url=url, timeout=options.timeout, limits=limits) as http:

        async def worker() -> None:
            while True:
                async with lock:
                    if counts["sent"] >= options.cases:
                        return
                    counts["sent"] += 1
                    number = counts["sent"]
                    method, path, headers, body = cases.next()
                if number == options.cases // 2:
                    rss["middle"] = rss_kib(pid)
                try:
                    async with http.stream(
                        method, path, headers=headers, content=body or None
                    ) as response:
                        chunks: list[bytes] = []
                        size = 0
                        with anyio.move_on_after(
                            0.5
                            if "event-stream" in response.headers.get("content-type", "")
                            else options.timeout
                        ):
                            async for chunk in response.aiter_bytes():
                                chunks.append(chunk)
                                size += len(chunk)
                                if size > 65536:
                                    break
                        text = b"".join(chunks).decode(errors="replace")
                except httpx.TimeoutException:
                    counts["hangs"] += 1
                    examples.setdefault("hang", f"{method} {path} {body[:200]!r}")
                    continue
                except httpx.HTTPError as error:
                    counts["transport"] += 1
                    examples.setdefault("transport", f"{type(error).__name__}: {method} {path}")
                    continue
                if response.status_code >= 500:
                    counts["5xx"] += 1
                    examples.setdefault(
                        "5xx",
                        f"{response.status_code} {method} {path} {body[:200]!r} -> {text[:300]}",
                    )
                if any(word in text for word in LEAKS):
                    counts["leaks"] += 1
                    examples.setdefault("leak", f"{method} {path} {body[:200]!r} -> {text[:300]}")

        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            for _ in range(options.concurrency):
                tg.start_soon(worker)
        elapsed = time.monotonic() - started
    rss["end"] = rss_kib(pid)
    return {"counts": counts, "examples": examples, "rss_kib": rss, "seconds": elapsed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=15.0, help="seconds before a hang")
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="1,000 cases")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args(argv)
    if options.quick:
        options.cases = 1000
    with tempfile.TemporaryDirectory(prefix="harness-fuzz-") as directory:
        port = free_port()
        config = Path(directory) / "fuzzed.toml"
        config.write_text(
            textwrap.dedent(
                f"""
                [agent]
                id = "fuzzed"

                [server]
                bind = "127.0.0.1:{port}"
                max_request_bytes = 262144

                [model]
                kind = "echo"
                """
            )
        )
        log_path = Path(directory) / "serve.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "harness_core.cli",
                    "serve",
                    str(config),
                    "--log-format",
                    "json",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + 60
            while "serving 1 agent" not in log_path.read_text(errors="replace"):
                if process.poll() is not None or time.monotonic() > deadline:
                    print(log_path.read_text(errors="replace"), file=sys.stderr)
                    return 1
                time.sleep(0.05)
            report = anyio.run(run, options, f"http://127.0.0.1:{port}", process.pid)
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                report_exit = process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                report_exit = process.wait()
        text = log_path.read_text(errors="replace")
        lines = text.splitlines()
        records = [json.loads(line) for line in lines if line.startswith("{")]
        report["server_exit"] = report_exit
        report["log"] = {
            "bytes": len(text.encode()),
            "lines": len(lines),
            "error_lines": sum(1 for r in records if r.get("level") in ("ERROR", "CRITICAL")),
            "tracebacks": text.count("Traceback"),
            "not_json": sum(1 for line in lines if line and not line.startswith("{")),
        }
    if options.json:
        print(json.dumps(report, indent=2))
        return 0
    counts = report["counts"]
    print(f"{counts['sent']} cases in {report['seconds']:.1f} s, concurrency {options.concurrency}")
    for name in ("5xx", "leaks", "hangs", "transport"):
        print(f"  {name:10} {counts[name]}")
    rss = report["rss_kib"]
    print(f"  rss KiB    before {rss['before']}, middle {rss.get('middle', 0)}, end {rss['end']}")
    log = report["log"]
    print(
        f"  log        {log['bytes']} bytes, {log['lines']} lines, {log['error_lines']} ERROR, "
        f"{log['tracebacks']} tracebacks, {log['not_json']} not JSON"
    )
    print(f"  server exit code {report['server_exit']}")
    for name, example in report["examples"].items():
        print(f"  e.g. {name}: {example}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
