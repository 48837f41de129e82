"""Waiting in tests for a condition another process or thread makes true."""

from __future__ import annotations

import time
from collections.abc import Callable


def until(predicate: Callable[[], object], timeout: float, what: str) -> object:
    """Poll `predicate` every 20 ms until it returns a truthy value (returned); AssertionError
    naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.02)
    raise AssertionError(f"no {what} after {timeout} s")
