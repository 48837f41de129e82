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

Enforced: `no_probe_waits`, the first dependency of every API route (api/app.py), marks the
request as one that must not wait for the probe in a thread (hardware.forbid_probe_waits: its
worker threads inherit the mark); `host_known` lifts it once the answer is in. A route that
reaches host_info without HOST_KNOWN is logged on a GPU host and fails its tests (the suite sets
hardware.STRICT_PROBE_WAITS).
"""

from __future__ import annotations

import asyncio
import weakref

import anyio
from fastapi import Depends, Request

from lorastudio.jobs.hardware import (
    HostInfo,
    allow_probe_waits,
    forbid_probe_waits,
    host_info,
    known_host_info,
)

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
        allow_probe_waits()  # this ask runs in the one limited thread, on purpose
        host = await anyio.to_thread.run_sync(host_info, limiter=_probe_limiter())
    allow_probe_waits()  # the answer is known: the route's own calls cost nothing
    return host


async def no_probe_waits(request: Request) -> None:
    """Every API route's first dependency: this request may not wait for the GPU probe in a
    request thread (hardware.forbid_probe_waits) until `host_known` awaited the answer. Async,
    so the mark is set in the request's own context and copied into its threads."""
    route = request.scope.get("route")  # its path as the schema spells it (`{file}`, not `{file:path}`)
    path = getattr(route, "path_format", None) or getattr(route, "path", request.url.path)
    forbid_probe_waits(f"{request.method} {path}")


HOST_KNOWN = [Depends(host_known)]  # a route's `dependencies=`: the probe answered before it runs
