"""Which ranks of a data-parallel job still answer (no torch, no HTTP).

Every rank tells the launcher it is alive at each stop poll of its run (jobs/rank_worker.py: a
"beat", at most one per BEAT_EVERY_S; rank 0's events count too), so when the hang watch
(jobs/step_watch.py) finds the job silent, the launcher can say which rank stopped answering:
the ranks not heard from within the silence allowed are named with their pids and how long ago
each was last heard, the others as still answering. Every rank silent alike is a collective that
one rank never joined (it hangs inside a step) or a stall of all of them: each is named, the one
silent longest first.
"""

from __future__ import annotations

import threading
import time

BEAT_EVERY_S = 1.0  # a rank's beats at most this often (its stop polls come once a step)


class BeatClock:
    """A rank's side: `due()` is True at most once per BEAT_EVERY_S (the first call: True), when
    the rank sends its {"kind": "beat"} (jobs/rank_worker.py to the job service, jobs/rank_watch.py
    to a CLI launch)."""

    def __init__(self) -> None:
        self._at = -BEAT_EVERY_S

    def due(self) -> bool:
        now = time.monotonic()
        if now - self._at < BEAT_EVERY_S:
            return False
        self._at = now
        return True


class RankSilence:
    """When each rank of a job was last heard from (monotonic seconds). Thread-safe."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self._heard: dict[int, float] = {}
        self._pids: dict[int, int] = {}
        self._lock = threading.Lock()

    def heard(self, rank: int, pid: int | None = None, now: float | None = None) -> None:
        """Note a message of `rank` (its process `pid`, when known) at `now` (default: now)."""
        with self._lock:
            self._heard[rank] = time.monotonic() if now is None else now
            if pid is not None:
                self._pids[rank] = pid

    def note(self, silent_s: float, now: float | None = None) -> str | None:
        """The ranks not heard from for over `silent_s` seconds, named with their pids and the
        ranks still answering; None when no rank connected yet."""
        now = time.monotonic() if now is None else now
        with self._lock:
            ages = {rank: now - at for rank, at in self._heard.items()}
            pids = dict(self._pids)
        if not ages:
            return None

        def name(rank: int) -> str:
            return f"rank {rank} (pid {pids.get(rank, '?')}, last heard {ages[rank]:.0f} s ago)"

        silent = sorted((r for r, age in ages.items() if age > silent_s), key=lambda r: -ages[r])
        answering = sorted(r for r in ages if r not in silent)
        never = [r for r in range(self.world_size) if r not in ages]
        parts = []
        if silent and not answering and not never:
            parts.append(f"every rank of {self.world_size} is silent: " + ", ".join(map(name, silent)))
        elif silent:
            parts.append(f"silent: {', '.join(map(name, silent))} of {self.world_size}")
        if answering and silent:
            parts.append("still answering: " + ", ".join(name(r) for r in answering))
        if never:
            parts.append("never connected: " + ", ".join(f"rank {r}" for r in never))
        return "; ".join(parts) or None
