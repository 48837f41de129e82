"""What each test costs in CPU seconds, the processes it started included (an opt-in pytest plugin).

    PYTHONPATH=src:. python -m pytest -p tests.cpu_costs -n 2 tests/api/test_api_training.py

writes one line per test, "node id <TAB> wall s <TAB> CPU s of the test process <TAB> CPU s of its
children", to <folder>/<xdist worker or "main">.tsv (folder: LORASTUDIO_TEST_COSTS, default
.test-costs/ under the working folder; lines are appended: empty the folder between runs), and the
run ends with each file's sums, the costliest first.

Why CPU and not wall time: the suite is CPU-bound and on a shared host the load moves wall time
3-5x, while CPU seconds stay put. The children are what the test process reaped while the test ran
(`getrusage(RUSAGE_CHILDREN)`): a worker, a CLI run or a probe the test waited for, with their own
reaped children (a server's workers). A process reaped later (a module-scoped server, stopped
after the module's last test) counts in the test whose teardown stopped it, so add up a file's
lines rather than read one test's; a process nobody reaps (killed by its death signal) is not
counted at all.
"""

from __future__ import annotations

import os
import resource
import time
from collections import defaultdict
from pathlib import Path
from typing import IO

import pytest

_log: IO[str] | None = None


def _folder() -> Path:
    return Path(os.environ.get("LORASTUDIO_TEST_COSTS") or ".test-costs")


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Set-up, call and teardown of one test, measured."""
    global _log
    if _log is None:
        _folder().mkdir(parents=True, exist_ok=True)
        name = os.environ.get("PYTEST_XDIST_WORKER", "main")
        _log = (_folder() / f"{name}.tsv").open("a", buffering=1, encoding="utf-8")
    wall, own, children = time.perf_counter(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    yield
    wall = time.perf_counter() - wall
    own = _cpu(resource.RUSAGE_SELF) - own
    children = _cpu(resource.RUSAGE_CHILDREN) - children
    _log.write(f"{item.nodeid}\t{wall:.3f}\t{own:.3f}\t{children:.3f}\n")


def pytest_terminal_summary(terminalreporter) -> None:
    """Each test file's sums over the folder's lines (in the xdist controller: all workers')."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for path in sorted(_folder().glob("*.tsv")):
        for line in path.read_text(encoding="utf-8").splitlines():
            node, wall, own, children = line.rsplit("\t", 3)
            sums = files[node.split("::", 1)[0]]
            sums[0] += float(wall)
            sums[1] += float(own)
            sums[2] += float(children)
            sums[3] += 1
    if not files:
        return
    terminalreporter.section(f"CPU seconds per test file ({_folder()})")
    terminalreporter.write_line(f"{'CPU s':>8} {'own':>7} {'children':>8} {'wall s':>8} {'tests':>5}  file")
    total = [0.0, 0.0, 0.0, 0]
    ranked = sorted(files.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))
    for name, (wall, own, children, count) in ranked:
        total = [total[0] + wall, total[1] + own, total[2] + children, total[3] + count]
        terminalreporter.write_line(
            f"{own + children:8.1f} {own:7.1f} {children:8.1f} {wall:8.1f} {count:5d}  {name}"
        )
    wall, own, children, count = total
    terminalreporter.write_line(
        f"{own + children:8.1f} {own:7.1f} {children:8.1f} {wall:8.1f} {count:5d}  (all)"
    )
