"""bench/soak.py's measures: a process tree from /proc, zombies included."""

from __future__ import annotations

import os
import subprocess
import sys

from bench.soak import _tree
from tests.polling import until


def test_the_tree_lists_each_child_with_its_state_fds_and_threads() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ended = subprocess.Popen([sys.executable, "-c", "pass"])  # not waited for: a zombie
    try:
        until(
            lambda: {c["pid"]: c["state"] for c in _tree(os.getpid())}.get(ended.pid) == "Z", 30, "the zombie"
        )
        tree = {c["pid"]: c for c in _tree(os.getpid())}
        assert tree[os.getpid()]["fds"] >= 3 and tree[os.getpid()]["threads"] >= 1
        assert tree[sleeper.pid]["state"] in "SR" and tree[sleeper.pid]["rss_mb"] > 1
    finally:
        sleeper.kill()
        sleeper.wait()
        ended.wait()
