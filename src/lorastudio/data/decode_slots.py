"""Where this process decodes image pixels for checks and previews: two dedicated threads.

Every decode of pixels the server makes (upload and dataset checks, thumbnails) runs on one of
DECODE_SLOTS threads of a process-wide pool (`run_decode`; a function running there must not
call `run_decode` itself, or two such calls could wait for each other forever): twelve concurrent thumbnail
requests of large images decode two at a time instead of twelve. Dedicated threads matter for
memory as much as the count: the C allocator keeps freed memory in the arena of the thread that
used it, so decodes spread over the server's ~40 request threads would each leave their peak
behind (measured: +985 MB after 12 thumbnails of 16.7 MP PNGs with only a 2-slot semaphore),
while two decode threads keep at most two decodes' worth.

A caller that must not wait long (a thumbnail request) passes `wait_s` and gets DecodeBusy
when its decode has not started in time (it is then cancelled) or at once when MAX_WAITING
decodes already wait; the route answers 503 with Retry-After.

DEFAULT_DECODE_PIXELS is the default of `settings.max_decode_pixels`, the budget of one decode
in the server: 4096 x 4096 pixels is at most ~64 MB as RGBA (~84 MB with a mode conversion;
a WebP counts 4x its pixels, see `images.decode_cost`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from lorastudio.errors import LorastudioError

DECODE_SLOTS = 2
MAX_WAITING = 16
DEFAULT_DECODE_PIXELS = 4096 * 4096

T = TypeVar("T")

_pool = ThreadPoolExecutor(max_workers=DECODE_SLOTS, thread_name_prefix="lorastudio-decode")
_lock = threading.Lock()
_pending = 0  # submitted decodes not finished yet (running or waiting)


def _fresh_pool_after_fork() -> None:
    """A forked child has none of the parent's threads: give it a pool (and counts) of its own."""
    global _pool, _lock, _pending
    _pool = ThreadPoolExecutor(max_workers=DECODE_SLOTS, thread_name_prefix="lorastudio-decode")
    _lock = threading.Lock()
    _pending = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_pool_after_fork)


class DecodeBusy(LorastudioError):
    """No decode thread was free within the caller's wait (or too many decodes wait)."""

    def __init__(self, retry_after_s: int):
        self.retry_after_s = retry_after_s
        super().__init__(f"the server is decoding other images; retry in {retry_after_s} s")


def _done(_: Future) -> None:
    global _pending
    with _lock:
        _pending -= 1


def submit_decode(fn: Callable[[], T]) -> Future[T]:
    """Queue `fn` (a decode) on the process's decode threads and return its future at once: a
    caller with many files (data/decode_checks.check_images) keeps at most DECODE_SLOTS of its own
    pending, so that both threads work while no more than their decodes hold pixels. `fn` must
    not call `run_decode` or `submit_decode` itself (see the module docstring)."""
    global _pending
    with _lock:
        _pending += 1
    future = _pool.submit(fn)
    future.add_done_callback(_done)
    return future


def run_decode(fn: Callable[[], T], wait_s: float | None = None) -> T:
    """Run `fn` (a decode) on one of the process's decode threads and return its result.

    Takes: `wait_s`, the longest wait for the decode to start (None: as long as it takes).
    Raises: what `fn` raises; DecodeBusy when `wait_s` is set and the decode did not start
    within it, or MAX_WAITING + DECODE_SLOTS decodes are already pending.
    """
    global _pending
    retry = DecodeBusy(max(1, round((wait_s or 4) / 4)))
    with _lock:
        if wait_s is not None and _pending >= MAX_WAITING + DECODE_SLOTS:
            raise retry
        _pending += 1
    started = threading.Event()

    def call() -> T:
        started.set()
        return fn()

    future = _pool.submit(call)
    future.add_done_callback(_done)
    if wait_s is not None and not started.wait(wait_s) and future.cancel():
        raise retry
    return future.result()
