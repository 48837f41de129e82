"""How many images this process decodes at once, and the default pixel budget of one decode.

Every decode of pixels the server makes (upload and dataset checks, thumbnails) holds one of
DECODE_SLOTS slots: twelve concurrent thumbnail requests of large images decode two at a time
instead of twelve (each decode holds up to ~5 bytes per pixel). A caller that must not wait long
(a thumbnail request) passes `wait_s` and gets DecodeBusy when no slot frees in time, or at
once when MAX_WAITING callers already wait; the route answers 503 with Retry-After.

DEFAULT_DECODE_PIXELS is the default of `settings.max_decode_pixels`, the budget of one decode
in the server: 4096 x 4096 pixels is at most ~64 MB as RGBA (~84 MB with a mode conversion).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from lorastudio.errors import LorastudioError

DECODE_SLOTS = 2
MAX_WAITING = 16
DEFAULT_DECODE_PIXELS = 4096 * 4096

_slots = threading.BoundedSemaphore(DECODE_SLOTS)
_lock = threading.Lock()
_waiting = 0


class DecodeBusy(LorastudioError):
    """Every decode slot stayed taken for the caller's wait (or too many callers wait)."""

    def __init__(self, retry_after_s: int):
        self.retry_after_s = retry_after_s
        super().__init__(f"the server is decoding other images; retry in {retry_after_s} s")


@contextmanager
def decode_slot(wait_s: float | None = None) -> Iterator[None]:
    """Hold one of the process's decode slots for the block.

    Takes: `wait_s`, the longest wait for a slot (None: wait as long as it takes).
    Raises: DecodeBusy when `wait_s` is set and no slot freed within it, or MAX_WAITING callers
    with a `wait_s` already wait.
    """
    global _waiting
    if wait_s is None:
        _slots.acquire()
    else:
        with _lock:
            if _waiting >= MAX_WAITING:
                raise DecodeBusy(max(1, round(wait_s / 4)))
            _waiting += 1
        try:
            got = _slots.acquire(timeout=wait_s)
        finally:
            with _lock:
                _waiting -= 1
        if not got:
            raise DecodeBusy(max(1, round(wait_s / 4)))
    try:
        yield
    finally:
        _slots.release()
