"""The bookkeeping of generation requests in flight (jobs/generation.py's GenerationService):
which ids are in flight and in what state, who owns each, which one the worker runs, the cap on
how many wait, and cancelling one. Thread-safe; knows nothing of the worker but the object it
asks to cancel (GenerationProcess.cancel / clear_cancel).

A request is admitted LIVE (`admit`: JobActive for an id already in flight or past
MAX_IN_FLIGHT), may be marked CANCELLED (`cancel`) while it waits or runs, then SAVING once
its worker finished (`saving`: from then on a cancel answers NotFound and the image is kept),
and is forgotten when its call ends (`finish`). The checks and the changes that race a cancel
(`saving`, `start_running`) are made under one lock, so a cancel that came first always wins.
"""

from __future__ import annotations

import threading
from typing import Protocol

from lorastudio.errors import GenerationCancelled, JobActive, NotFound

# States of a request in flight: waiting or running / cancelled / its image being saved (ended).
LIVE, CANCELLED, SAVING = "live", "cancelled", "saving"
# Requests in flight at most (one runs, the rest wait): each holds a server thread while it
# waits, and the API's threads (40) serve every other route, the cancel route included.
MAX_IN_FLIGHT = 8


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

    def __len__(self) -> int:
        """How many requests are in flight (waiting for the worker, running or saving)."""
        with self._lock:
            return len(self._states)

    def admit(self, rid: str, owner: object | None) -> None:
        """Take request `rid` (of `owner`) in flight, LIVE. Raises JobActive when a request of
        this id is in flight already or MAX_IN_FLIGHT requests are."""
        with self._lock:
            if rid in self._states:
                raise JobActive(f"a generation with request_id {rid!r} is in flight already")
            if len(self._states) >= MAX_IN_FLIGHT:
                raise JobActive(
                    f"{MAX_IN_FLIGHT} generations are in flight already (one runs, the others wait "
                    "for the worker): try again when one has ended"
                )
            self._states[rid] = LIVE
            self._owners[rid] = owner

    def finish(self, rid: str) -> None:
        """Forget request `rid` (its call ended, whichever way). Idempotent."""
        with self._lock:
            self._states.pop(rid, None)
            self._owners.pop(rid, None)

    def cancel(self, rid: str, owner: object | None = None) -> str:
        """Mark request `rid` CANCELLED: "running" (the worker running it was asked to stop) or
        "waiting". A second cancel answers the same. Raises NotFound when no such request is in
        flight (unknown, or saving: it ended), or, with an `owner`, when `rid` is not that
        owner's."""
        with self._lock:
            state = self._states.get(rid, SAVING)
            if state == SAVING or (owner is not None and self._owners.get(rid) is not owner):
                raise NotFound(f"no generation {rid!r} in flight (unknown, or it ended)")
            self._states[rid] = CANCELLED
            if self._running is not None and self._running[0] == rid:
                self._running[1].cancel()
                return "running"
            return "waiting"

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

    def start_running(self, rid: str, worker: Cancellable) -> None:
        """Record that `worker` runs request `rid` (a cancel from now on reaches it), clearing an
        earlier request's cancel on it. Checked and set together: raises GenerationCancelled when
        `rid` was cancelled before."""
        with self._lock:
            if self._states.get(rid) == CANCELLED:
                raise GenerationCancelled("generation cancelled before it started")
            worker.clear_cancel()  # an earlier request's cancel is not this one's
            self._running = (rid, worker)

    def stop_running(self) -> None:
        """No request runs in the worker any more."""
        with self._lock:
            self._running = None
