"""The processes under a process, read from /proc (the CLI launch tests: every rank and agent gone)."""

from __future__ import annotations

from pathlib import Path


def descendants(pid: int) -> list[int]:
    """Every process under `pid` (children of each of its threads, recursively), but the test
    process's zygote (tests/zygote.py: no process of the test's, it outlives every test)."""
    from zygote import ZYGOTE

    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children = [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
        for child in children:
            if child == ZYGOTE.pid:
                continue
            found += [child, *descendants(child)]
    return found
