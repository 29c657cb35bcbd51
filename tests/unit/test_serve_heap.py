"""``harness_asgi.serve.freeze_startup_heap``: what a serving process's collector stops scanning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_heap_is_frozen_once_per_process_after_its_garbage_is_collected() -> None:
    # In a fresh interpreter: the test process's own collector is not this test's to change.
    code = """
import gc
import weakref
from harness_asgi.serve import freeze_startup_heap

class Node:
    def __init__(self):
        self.me = self

garbage = Node()  # cyclic garbage from startup: collected before the freeze, not frozen with it
gone = weakref.ref(garbage)
del garbage
assert gc.get_freeze_count() == 0
freeze_startup_heap()
frozen = gc.get_freeze_count()
assert frozen > 10_000, frozen  # the imports' objects
assert gone() is None, "the startup garbage was frozen"
kept = [Node() for _ in range(1000)]
freeze_startup_heap()  # a second group in the same process: nothing more is frozen
assert gc.get_freeze_count() == frozen, (gc.get_freeze_count(), frozen)
del kept
assert gc.collect() >= 1000  # what came after the freeze is still collected
print("ok")
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=REPO
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
