"""Waiting in tests for a condition another process or thread makes true."""

from __future__ import annotations

import time
from collections.abc import Callable

# How long a test waits for a job worker the job service starts to reach its first event: a fork
# from the test process's zygote (tests/zygote.py) takes milliseconds, but the zygote's own first
# start in a pytest worker imports torch, diffusers and peft, which took over 30 s on the shared
# 2-core host at load ~12 (RELIABILITY 2260); live_server.WORKER_TIMEOUT_S is the same figure
# for a request that starts one.
WORKER_START_S = 120.0


def until(predicate: Callable[[], object], timeout: float, what: str) -> object:
    """Poll `predicate` every 20 ms until it returns a truthy value (returned); AssertionError
    naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.02)
    raise AssertionError(f"no {what} after {timeout} s")
