"""The bookkeeping of generation requests in flight (jobs/generation.py's GenerationService):
which ids are in flight and in what state, who owns each, which one the worker runs, the cap on
how many wait, and cancelling one. Thread-safe; knows nothing of the worker but the object it
asks to cancel (GenerationProcess.cancel / clear_cancel).

A request is admitted LIVE (`admit`: JobActive for an id already in flight or past
MAX_IN_FLIGHT), may be marked CANCELLED (`cancel`) while it waits or runs, then SAVING once
its worker finished (`saving`: from then on a cancel answers NotFound and the image is kept),
and is forgotten when its call ends (`finish`). The checks and the changes that race a cancel
(`saving`, `start_running`) are made under one lock, so a cancel that came first always wins.
A request's id names it alone: once it ended the id is retired for RETIRED_FOR_S (a cancel of it
answers NotFound naming when it ended, a new request with it JobActive naming why), so a late
cancel never reaches another request reusing the id; at most MAX_RETIRED ids are kept.
Each request in flight also has a phase (`progress`): QUEUED for the worker, LOADING (the worker
starts, loads the pipeline, applies the LoRAs), GENERATING step i of n (the worker's reports),
SAVING; the asynchronous form's status (jobs/generation_jobs.py) reads it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Protocol

from lorastudio.errors import GenerationCancelled, JobActive, NotFound

# States of a request in flight: waiting or running / cancelled / its image being saved (ended).
LIVE, CANCELLED, SAVING = "live", "cancelled", "saving"
# Phases of a request in flight (`progress`), as the asynchronous form's status names them.
QUEUED, LOADING, GENERATING = "queued", "loading", "generating"
# Requests in flight at most (one runs, the rest wait): each holds a server thread while it
# waits, and the API's threads (40) serve every other route, the cancel route included.
MAX_IN_FLIGHT = 8
# An ended request's id is refused this long (409), so that a cancel meant for it that arrives
# late (sent as it ended, queued behind other routes) never stops a new request reusing the id;
# at most MAX_RETIRED ids are kept (the oldest go first: each is ~100 bytes).
RETIRED_FOR_S = 600.0
MAX_RETIRED = 10_000


class Cancellable(Protocol):
    """What the bookkeeping needs of the worker running a request (GenerationProcess)."""

    def cancel(self) -> None: ...

    def clear_cancel(self) -> None: ...


class InFlight:
    """Generation requests in flight by id: their state, their owner, the one in the worker."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: dict[str, str] = {}  # id -> LIVE / CANCELLED / SAVING
        self._owners: dict[str, object] = {}  # id -> the owner its `generate` was given
        self._running: tuple[str, Cancellable] | None = None  # the request in the worker
        self._phases: dict[str, tuple[str, int, int]] = {}  # id -> (phase, steps done, of how many)
        self._planned: dict[str, int] = {}  # id -> the steps it will take, known before its worker says
        self.retired: OrderedDict[str, float] = OrderedDict()  # ended ids -> when (monotonic)

    def __len__(self) -> int:
        """How many requests are in flight (waiting for the worker, running or saving)."""
        with self._lock:
            return len(self._states)

    def admit(self, rid: str, owner: object | None) -> None:
        """Take request `rid` (of `owner`) in flight, LIVE. Raises JobActive when a request of
        this id is in flight already or ended less than RETIRED_FOR_S ago, or MAX_IN_FLIGHT
        requests are."""
        with self._lock:
            if rid in self._states:
                raise JobActive(f"a generation with request_id {rid!r} is in flight already")
            if (ended := self._retired_age(rid, time.monotonic())) is not None:
                raise JobActive(
                    f"request_id {rid!r} named a generation that ended {ended:.0f} s ago: an id is not "
                    f"reused for {RETIRED_FOR_S / 60:g} minutes after its request ended, so that a late "
                    "cancel of that one never stops this one; send a new request_id"
                )
            if len(self._states) >= MAX_IN_FLIGHT:
                raise JobActive(
                    f"{MAX_IN_FLIGHT} generations are in flight already (one runs, the others wait "
                    "for the worker): try again when one has ended"
                )
            self._states[rid] = LIVE
            self._owners[rid] = owner
            self._phases[rid] = (QUEUED, 0, 0)

    def finish(self, rid: str) -> None:
        """Forget request `rid` (its call ended, whichever way) and retire its id. Idempotent."""
        with self._lock:
            self._states.pop(rid, None)
            self._owners.pop(rid, None)
            self._phases.pop(rid, None)
            self._planned.pop(rid, None)
            self.retired[rid] = time.monotonic()
            self.retired.move_to_end(rid)
            while len(self.retired) > MAX_RETIRED:
                self.retired.popitem(last=False)

    def _retired_age(self, rid: str, now: float) -> float | None:
        """Seconds since request `rid` ended, if its id is still retired (else None); forgets
        the ids retired longer than RETIRED_FOR_S. Under self._lock."""
        while self.retired:
            oldest, ended = next(iter(self.retired.items()))
            if now - ended < RETIRED_FOR_S:
                break
            del self.retired[oldest]
        ended = self.retired.get(rid)
        return None if ended is None else now - ended

    def cancel(self, rid: str, owner: object | None = None) -> str:
        """Mark request `rid` CANCELLED: "running" (the worker running it was asked to stop) or
        "waiting". A second cancel answers the same. Raises NotFound when no such request is in
        flight (unknown, or saving: it ended; an ended one's id is retired, so this cancel never
        reaches a later request of it), or, with an `owner`, when `rid` is not that owner's."""
        with self._lock:
            state = self._states.get(rid, SAVING)
            if state == SAVING or (owner is not None and self._owners.get(rid) is not owner):
                ended = self._retired_age(rid, time.monotonic())
                why = "unknown, or it ended" if ended is None else f"it ended {ended:.0f} s ago"
                raise NotFound(f"no generation {rid!r} in flight ({why})")
            self._states[rid] = CANCELLED
            if self._running is not None and self._running[0] == rid:
                self._running[1].cancel()
                return "running"
            return "waiting"

    def cancel_all(self) -> int:
        """Cancel every request in flight that has not ended (`cancel` of each: the running one's
        worker is asked to stop; one saving its image is left to keep it). Returns how many."""
        with self._lock:
            live = [rid for rid, state in self._states.items() if state == LIVE]
            for rid in live:
                self._states[rid] = CANCELLED
            if self._running is not None and self._running[0] in live:
                self._running[1].cancel()
            return len(live)

    def cancelled(self, rid: str) -> bool:
        """Whether request `rid` was cancelled."""
        with self._lock:
            return self._states.get(rid) == CANCELLED

    def saving(self, rid: str) -> None:
        """Mark request `rid`, whose worker finished, as saving its image: from now on a cancel
        answers NotFound (it ended) and the image is kept whole. Checked and set together, so
        a cancel that came first wins: raises GenerationCancelled (the image is not kept)."""
        with self._lock:
            if self._states.get(rid) == CANCELLED:
                raise GenerationCancelled("generation cancelled; its image was not kept")
            self._states[rid] = SAVING
            _, done, of = self._phases.get(rid, (SAVING, 0, 0))
            self._phases[rid] = (SAVING, done, of)

    def start_running(self, rid: str, worker: Cancellable) -> None:
        """Record that `worker` runs request `rid` (a cancel from now on reaches it), clearing an
        earlier request's cancel on it. Checked and set together: raises GenerationCancelled when
        `rid` was cancelled before."""
        with self._lock:
            if self._states.get(rid) == CANCELLED:
                raise GenerationCancelled("generation cancelled before it started")
            worker.clear_cancel()  # an earlier request's cancel is not this one's
            self._running = (rid, worker)
            self._phases[rid] = (LOADING, 0, self._planned.get(rid, 0))

    def plan(self, rid: str, of: int) -> None:
        """Request `rid` (in flight) will take `of` denoising steps (generation_check.planned_steps):
        its progress says so from now on until its worker reports its own count."""
        with self._lock:
            if rid in self._phases:
                self._planned[rid] = of
                phase, done, _ = self._phases[rid]
                self._phases[rid] = (phase, done, of)

    def stepped(self, rid: str, done: int, of: int) -> None:
        """Request `rid`'s pipeline is ready and `done` of its `of` denoising steps are done
        (0: none yet; `of` 0: not said by the worker: the `plan`ned count). Ignored once it is saving or ended."""
        with self._lock:
            if self._states.get(rid) in (LIVE, CANCELLED):
                self._phases[rid] = (GENERATING, max(0, done), max(0, of) or self._planned.get(rid, 0))

    def progress(self, rid: str) -> tuple[str, int, int] | None:
        """(phase, steps done, of how many) of request `rid` in flight (QUEUED, LOADING,
        GENERATING or SAVING), or None when it is not in flight."""
        with self._lock:
            return self._phases.get(rid)

    def stop_running(self) -> None:
        """No request runs in the worker any more."""
        with self._lock:
            self._running = None
