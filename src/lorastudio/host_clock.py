"""The host's clock for durations and orders that span this host's processes (a process's start
against its run's first event, a standby worker's hand-over, which rank of a launch failed first).

`time.time()` is the wall clock: an NTP step, a user setting the time or a VM resumed with its
clock corrected moves it back or forward, so a difference of two readings taken around such a
step is off by the step (an hour, or the 56 years of a host booted in 1970). `time.monotonic()`
never moves back but is, by the standard library's word, only comparable within one process.
Linux's CLOCK_BOOTTIME is one clock for every process of the host, never set, and counts a
suspend (a process that started before it was as old as its owner sees). Elsewhere this falls
back on time.monotonic() (CLOCK_MONOTONIC / mach_absolute_time: system-wide there too).
No torch.
"""

from __future__ import annotations

import time

_CLOCK = getattr(time, "CLOCK_BOOTTIME", None)


def host_now() -> float:
    """Seconds on the host's clock (module docstring): only differences of two readings on
    this host mean anything."""
    return time.clock_gettime(_CLOCK) if _CLOCK is not None else time.monotonic()
