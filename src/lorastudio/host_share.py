"""The share of one CPU core the host gives this thread now: the wall-time forecast's contention
measure on a shared CPU host (jobs/time_forecast.py, RESULTS note 48).

On a host that other processes load, a one-thread CPU run's wall time is its CPU seconds over the
share of a core the scheduler gives it (RESULTS note 46: 1.7-5x its CPU seconds on the 2-core dev
host, where the 1-minute load average did not predict it). The measure is the same as that: a
burst of pure-Python arithmetic timed on this thread's CPU clock (time.thread_time: a server
thread's neighbours in the process are not counted) and on the wall clock; CPU seconds over wall
seconds is the share of a core this thread got while it ran. Bursts are busy back to back (a
thread that slept between them would get the scheduler's wake-up credit, which a training run's
busy thread does not get), and a meter can take them at several moments of a check
(`HostShare.burst`), their CPU over their wall seconds taken together.

Why hand-written: no library reports the share of a core a process gets; os.getloadavg counts the
runnable tasks, not their nice levels or how much of a core each takes (RESULTS note 46).
"""

from __future__ import annotations

import time
from collections.abc import Callable

BURST_CPU_S = 0.025  # each burst's CPU seconds (a few of the scheduler's slices)
BURSTS = 3  # the bursts a meter has taken by the time its share is read
# a burst's longest wall time: a share of 1 % (the least the forecast takes) at BURST_CPU_S; a thread
# CPU clock that does not move (a sandbox's) ends the burst here instead of spinning for ever
BURST_WALL_MAX_S = 100 * BURST_CPU_S
_CHUNK = 2000  # arithmetic between reads of the clocks


class HostShare:
    """A meter of the share of one core this thread gets: `burst()` runs one busy burst and adds
    its CPU and wall seconds; `share()` is their CPU over their wall seconds (at most 1), after
    taking the bursts it lacks of BURSTS. `clocks`: (wall, thread CPU) clock functions (tests
    pass recorded ones)."""

    def __init__(
        self,
        clocks: tuple[Callable[[], float], Callable[[], float]] = (time.perf_counter, time.thread_time),
        burst_cpu_s: float = BURST_CPU_S,
    ):
        self.wall, self.cpu = clocks
        self.burst_cpu_s = burst_cpu_s
        self.cpu_s = 0.0  # the bursts' CPU seconds, summed
        self.wall_s = 0.0  # and their wall seconds
        self.bursts = 0

    def burst(self) -> None:
        """One busy burst of `burst_cpu_s` of this thread's CPU time (at most 100 times that of
        wall time: BURST_WALL_MAX_S), both clocks read around it."""
        wall0, cpu0 = self.wall(), self.cpu()
        longest = self.burst_cpu_s * (BURST_WALL_MAX_S / BURST_CPU_S)
        x = 0
        while self.cpu() - cpu0 < self.burst_cpu_s and self.wall() - wall0 < longest:
            for i in range(_CHUNK):
                x += i * i
        self.add(self.cpu() - cpu0, self.wall() - wall0)

    def add(self, cpu_s: float, wall_s: float) -> None:
        """Count one burst's measured seconds (burst's, or a recorded burst in a test)."""
        self.cpu_s += max(cpu_s, 0.0)
        self.wall_s += max(wall_s, 0.0)
        self.bursts += 1

    def share(self) -> float:
        """The share of one core (0 < share <= 1) the bursts got, BURSTS of them at least."""
        while self.bursts < BURSTS:
            self.burst()
        if self.wall_s <= 0 or self.cpu_s <= 0:
            return 1.0  # a clock that did not move: nothing measured, no contention assumed
        return min(self.cpu_s / self.wall_s, 1.0)
