"""Waiting for the GPU facts (jobs/hardware.host_info) without holding a request thread.

The server never imports torch: a child process answers what the host's GPUs are (up to
hardware.PROBE_TIMEOUT_S, 5-20 s at a GPU host's first ask). A synchronous route that needs the
answer (a preflight, a start, a resume, a caption job's placement) would wait for it inside one
of the server's ~40 request threads, and 40 of them at once would hold every other synchronous
route (the dataset list, the run status) until the probe answered (RELIABILITY 185, 190).

Contract: `host_known` is an async dependency; a route that reaches host_info names it in its
decorator (`dependencies=HOST_KNOWN`) and FastAPI awaits it in the event loop before the route's
synchronous work enters the thread pool. While a probe is needed, its waiters queue on a limiter
of one (one of them asking at a time, in one thread; the others find its answer cached), not
each in a request thread; when the answer is known (`known_host_info`) it costs nothing.
"""

from __future__ import annotations

import asyncio
import weakref

import anyio
from fastapi import Depends

from lorastudio.jobs.hardware import HostInfo, host_info, known_host_info

# One limiter per event loop (an app runs in one; the tests' clients each in their own).
_one_ask: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = (
    weakref.WeakKeyDictionary()
)


def _probe_limiter() -> anyio.CapacityLimiter:
    loop = asyncio.get_running_loop()
    limiter = _one_ask.get(loop)
    if limiter is None:
        limiter = _one_ask[loop] = anyio.CapacityLimiter(1)
    return limiter


async def host_known() -> HostInfo:
    """This host's HostInfo (hardware.host_info), awaited without holding a request thread: at
    once when known, else after the probe (one thread asks; its waiters share the answer)."""
    host = known_host_info()
    if host is None:
        host = await anyio.to_thread.run_sync(host_info, limiter=_probe_limiter())
    return host


HOST_KNOWN = [Depends(host_known)]  # a route's `dependencies=`: the probe answered before it runs
