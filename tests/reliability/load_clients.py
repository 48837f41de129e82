"""Load generator run as its own process (so the clients do not share the server's interpreter):
`python load_clients.py URL N SECONDS [BURSTS IDLE]` opens N/2 event-stream clients and N - N/2
status pollers (each polls /api/train/status every POLL_S, with `since` as the web UI does) for
SECONDS, BURSTS times (default 1) with IDLE seconds without any client in between, then prints
one JSON line: {"status_latencies_ms": [...], "sse_connect_ms": [...], "sse_events": total,
"errors": [...], "bursts": [[start, end], ...]} (each burst's time.monotonic() span, from when its
clients were started to when the last one closed; the clock is system-wide, so the caller can
compare the training step counts it samples with them).

The clients stand in for browsers on other machines: the process runs at niceness +10 so that on
a small test machine the load generator itself does not take the training worker's CPU (remote
clients would not); what is measured is the server's cost to the run."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import httpx

POLL_S = 0.25
CLIENT_NICE = 10


async def poller(client: httpx.AsyncClient, until: float, out: list[float], errors: list[str]) -> None:
    """Poll like the web UI: the first status in full, then only metric points after the last
    step seen (`since`)."""
    since: int | None = None
    while time.monotonic() < until:
        t0 = time.perf_counter()
        try:
            resp = await client.get("/api/train/status", params={} if since is None else {"since": since})
            resp.raise_for_status()
            out.append((time.perf_counter() - t0) * 1000)
            job = resp.json()["job"]
            if job and job["metrics"]:
                since = job["metrics"][-1]["step"]
        except httpx.HTTPError as err:
            errors.append(repr(err))
        await asyncio.sleep(POLL_S)


async def streamer(
    client: httpx.AsyncClient, until: float, connect: list[float], events: list[int], errors: list[str]
) -> None:
    t0 = time.perf_counter()
    try:
        async with client.stream("GET", "/api/train/events") as resp:
            first = True
            async for line in resp.aiter_lines():
                if first:
                    connect.append((time.perf_counter() - t0) * 1000)
                    first = False
                if line.startswith("data: "):
                    events[0] += 1
                if time.monotonic() >= until:
                    break
    except httpx.HTTPError as err:
        errors.append(repr(err))


async def main(url: str, n: int, seconds: float, bursts: int = 1, idle: float = 0.0) -> dict:
    latencies: list[float] = []
    connect: list[float] = []
    events = [0]
    errors: list[str] = []
    spans: list[list[float]] = []
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
    for burst in range(bursts):
        if burst:
            await asyncio.sleep(idle)
        start = time.monotonic()
        until = start + seconds
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
            tasks = [streamer(client, until, connect, events, errors) for _ in range(n // 2)]
            tasks += [poller(client, until, latencies, errors) for _ in range(n - n // 2)]
            await asyncio.gather(*tasks)
        spans.append([start, time.monotonic()])
    return {
        "status_latencies_ms": latencies,
        "sse_connect_ms": connect,
        "sse_events": events[0],
        "errors": errors,
        "bursts": spans,
    }


if __name__ == "__main__":
    os.nice(CLIENT_NICE)
    args = sys.argv[1:]
    extra = (int(args[3]), float(args[4])) if len(args) > 3 else ()
    result = asyncio.run(main(args[0], int(args[1]), float(args[2]), *extra))
    print(json.dumps(result))
