"""The asynchronous form of a generation: its POST answers at once (202), the client polls.

Why. The synchronous POST /api/generate holds its connection until the image is made. Behind a
reverse proxy whose read timeout is shorter than the generation (nginx's default
proxy_read_timeout is 60 s; FLUX.1 or Qwen-Image at 1024 px and 50 steps on a consumer GPU, a
request queued behind others, the first request that loads the pipeline all take longer) the
proxy cuts it with a 504, and the studio, seeing its client leave, cancels it: nothing is made,
however long the proxy was let wait. Here the request is admitted (the service's MAX_IN_FLIGHT
cap) and checked (every problem at once) while its POST waits, so every refusal (400, 404, 409,
503) is still that POST's answer, then it runs on a thread of this registry and the POST answers
202 with its id. The client reads its state with short GETs (`status`): queued, loading,
generating step i of n, saving, then done (the gallery image's fields and URL), failed (the
error the synchronous form would have answered, with its HTTP status) or cancelled. No answer
outlives a proxy's timeout, a page reload finds the request again by its id, and a client that
goes away cancels nothing: only `cancel` does (the synchronous form's "client left -> cancel"
is its own route's watcher, never applied here).

Polling rather than an event stream: a stream is itself one long response, which proxies
buffer (nginx, unless told `proxy_buffering off`) or cut at their read timeout too; a GET every
second or so costs one small JSON answer. The state and step come from the service's
bookkeeping (jobs/generation_requests.py: the worker reports each denoising step).

Bounded memory: the requests in flight are the service's (MAX_IN_FLIGHT, shared with the
synchronous form: past it the POST answers its JobActive 409); an ended request's entry is kept
KEEP_FOR_S and at most KEEP_MAX are (the oldest forgotten first), each a few KB. Each request is
also recorded in the studio home (jobs/generation_records.py: when it is handed to its thread and
when it ends, the newest KEEP records kept), so a status forgotten here, or lost with a restart,
is read from its record: done with its image, failed or cancelled with its error, or, for one a
previous server had in flight, interrupted (never a 404 while its record is kept), unless the
gallery holds the image it committed before its "done" record was lost: then done with that image
(jobs/generation_recover.py). A kept or
recorded id is not taken again (JobActive). Thread-safe; no HTTP here (the route maps a failed
entry's error to its status, api/routes/generations.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lorastudio.errors import (
    GenerationCancelled,
    GenerationFailed,
    JobActive,
    LorastudioError,
    NotFound,
    ServerStopping,
)
from lorastudio.jobs.gallery import gallery_dir
from lorastudio.jobs.generation_records import INTERRUPTED, GenerationRecords
from lorastudio.jobs.generation_records import KEEP as RECORDS_KEEP
from lorastudio.jobs.generation_recover import committed_image
from lorastudio.jobs.generation_requests import MAX_IN_FLIGHT, QUEUED, SAVING

if TYPE_CHECKING:
    from lorastudio.jobs.generation import GenerationService
    from lorastudio.jobs.generation_inputs import GenerationRequest

log = logging.getLogger("lorastudio.jobs")

KEEP_FOR_S = 3600.0  # an ended request's entry is kept this long (its image stays in the gallery)
KEEP_MAX = 200  # ended entries kept at most (the oldest forgotten first): each holds a few KB
DONE, FAILED, CANCELLED = "done", "failed", "cancelled"


@dataclass
class _Entry:
    """One asynchronous request: its outcome once it ended."""

    request_id: str
    created: float  # time.time() of its POST
    outcome: str | None = None  # DONE / FAILED / CANCELLED once ended
    ended: float | None = None  # time.time() of its end
    ended_at: float = 0.0  # time.monotonic() of its end (its expiry's clock)
    result: dict[str, Any] | None = None  # DONE: GenerationService.generate's answer
    error: LorastudioError | None = None  # FAILED / CANCELLED: what generate raised
    cancelling: bool = False  # a cancel was asked while it ran
    handed: bool = False  # admitted and checked: on its thread (out of the service's books: saving)
    last: tuple[str, int, int] = field(default=(QUEUED, 0, 0))  # its last phase seen in flight


class GenerationJobs:
    """The asynchronous generation requests of one GenerationService, by id."""

    def __init__(self, service: GenerationService) -> None:
        self._service = service
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # in flight and ended, by POST order
        self._pool = ThreadPoolExecutor(MAX_IN_FLIGHT, thread_name_prefix="lorastudio-generation")
        self._records = GenerationRecords(service.settings.home)
        self._not_in_gallery: set[str] = set()  # interrupted records looked for in the gallery

    def __len__(self) -> int:
        """How many entries are kept (in flight and ended)."""
        with self._lock:
            self._expire(time.monotonic())
            return len(self._entries)

    def submit(self, req: GenerationRequest, request_id: str) -> dict[str, Any]:
        """Admit and check `req` as request `request_id`, then run it on a thread of this
        registry; returns its status (`status`: queued). Raises what the synchronous form
        raises before any work: JobActive (the id is in flight, kept here, or ended less than
        RETIRED_FOR_S ago; MAX_IN_FLIGHT requests are in flight; training holds the GPU),
        ServerStopping, and what `GenerationService.check` raises (its id then ended)."""
        with self._lock:
            self._expire(time.monotonic())
            if request_id in self._entries or self._records.read(request_id) is not None:
                raise JobActive(
                    f"request_id {request_id!r} names a generation kept here: GET /api/generations/"
                    f"{request_id} reads it; send a new request_id"
                )
            entry = _Entry(request_id, time.time())
            self._entries[request_id] = entry  # held under this id while it is checked
        try:
            checked = self._service.prepare(req, request_id)
        except BaseException:
            with self._lock:
                self._entries.pop(request_id, None)
            raise
        with self._lock:
            entry.handed = True
            entry.last = self._service.progress(request_id) or entry.last  # its planned steps
        self._records.write(self._ended_status(entry), new=True)  # before its thread can end it
        try:
            self._pool.submit(self._run, req, entry, checked)
        except RuntimeError as err:  # the pool was shut down (the server is stopping) meanwhile
            self._service.abandon(request_id)
            self._records.forget(request_id)
            with self._lock:
                self._entries.pop(request_id, None)
            raise ServerStopping(
                f"the server is stopping: generation {request_id!r} was not started"
            ) from err
        return self.status(request_id)

    def _run(self, req: GenerationRequest, entry: _Entry, checked: Any) -> None:
        """Run `entry`'s request to its end and record how it ended (never raises)."""
        try:
            result = self._service.run_admitted(
                req, entry.request_id, checked, lambda p: self._seen(entry, p)
            )
        except GenerationCancelled as err:
            self._end(entry, CANCELLED, error=err)
        except LorastudioError as err:
            self._end(entry, FAILED, error=err)
        except Exception as err:  # noqa: BLE001 - a thread's failure is the request's outcome, never lost
            self._end(
                entry, FAILED, error=GenerationFailed(f"generation failed: {type(err).__name__}: {err}")
            )
        else:
            self._end(entry, DONE, result=result)

    def _seen(self, entry: _Entry, phase: tuple[str, int, int]) -> None:
        with self._lock:
            entry.last = phase

    def _end(
        self,
        entry: _Entry,
        outcome: str,
        result: dict[str, Any] | None = None,
        error: LorastudioError | None = None,
    ) -> None:
        with self._lock:
            entry.outcome, entry.result, entry.error = outcome, result, error
            entry.ended, entry.ended_at = time.time(), time.monotonic()
            ended = self._ended_status(entry)
        self._records.write(ended, error)  # before it can be forgotten here: no 404 between
        with self._lock:
            self._expire(entry.ended_at)

    @staticmethod
    def _ended_status(entry: _Entry) -> dict[str, Any]:
        """`entry`'s status as its record keeps it (in flight: its last phase seen)."""
        phase, step, steps = entry.last
        return {
            "request_id": entry.request_id, "state": entry.outcome or phase, "step": step, "steps": steps,
            "created": entry.created, "ended": entry.ended, "result": entry.result,
        }  # fmt: skip

    def status(self, request_id: str) -> dict[str, Any]:
        """The state of request `request_id`: {request_id, state (queued / loading /
        generating / saving / done / failed / cancelled), step, steps (0: not known yet),
        cancelling, created, ended, result (done: the gallery image's fields), error (failed or
        cancelled: the exception)}; one forgotten here (or sent to a previous server) from its
        record (generation_records.py: also interrupted, a previous server's in flight). Raises
        NotFound for an id never posted here or whose record is gone."""
        with self._lock:
            self._expire(time.monotonic())
            entry = self._entries.get(request_id)
            if entry is None:
                recorded = self._records.read(request_id)
                if recorded is not None:
                    if recorded[0]["state"] == INTERRUPTED:
                        return self._recovered(recorded[0])
                    return recorded[0]
                raise NotFound(
                    f"no generation {request_id!r}: never sent to POST /api/generations, or its record was "
                    f"removed ({RECORDS_KEEP} newer generations since), or it was sent before this "
                    "lorastudio's upgrade (an older version kept no record; a finished one's image is in "
                    "the gallery)"
                )
            if entry.outcome is None:
                now = self._service.progress(request_id)
                if now is not None:
                    entry.last = now
                elif entry.handed:  # between the service's end of it and _end: its image is kept
                    entry.last = (SAVING, *entry.last[1:])
            phase, step, steps = entry.last
            return {
                "request_id": entry.request_id,
                "state": entry.outcome or phase,
                "step": step,
                "steps": steps,
                "cancelling": entry.cancelling and entry.outcome is None,
                "created": entry.created,
                "ended": entry.ended,
                "result": entry.result,
                "error": entry.error,
            }

    def _recovered(self, status: dict[str, Any]) -> dict[str, Any]:
        """An interrupted record's status, or done with its image when the gallery holds the
        image it committed before its "done" record was lost (jobs/generation_recover.py; the
        record is then rewritten as done). Looked for once per record and server."""
        rid = status["request_id"]
        if rid in self._not_in_gallery:
            return status
        found = committed_image(gallery_dir(self._service.settings), rid, status["created"])
        if found is None:
            self._not_in_gallery.add(rid)
            return status
        result, ended = found
        done = {**status, "state": DONE, "step": status["steps"] or status["step"], "ended": ended}
        done.update(result=result, error=None)
        self._records.write(done)
        log.warning(
            "generation %s: its record said in flight, its image %s is in the gallery: done",
            rid,
            result["file"],
        )
        return done

    def cancel(self, request_id: str) -> str:
        """Cancel request `request_id` (GenerationService.cancel): "waiting" (it ends now) or
        "running" (it stops after its current denoising step, or before the next component
        while loading); its state becomes cancelled, nothing kept. Raises NotFound when it is
        not kept here or already ended (its state says how)."""
        with self._lock:
            self._expire(time.monotonic())
            entry = self._entries.get(request_id)
            if entry is None or entry.outcome is not None:
                recorded = self._records.read(request_id) if entry is None else None
                ended = entry.outcome if entry is not None else recorded[0]["state"] if recorded else None
                how = "unknown here" if ended is None else f"it ended: {ended}"
                raise NotFound(f"no generation {request_id!r} in flight ({how})")
        was = self._service.cancel(request_id)
        with self._lock:
            entry.cancelling = True
        return was

    def _expire(self, now: float) -> None:
        """Forget ended entries older than KEEP_FOR_S, then the oldest ended past KEEP_MAX.
        Under self._lock."""
        ended = [rid for rid, e in self._entries.items() if e.outcome is not None]
        for rid in ended:
            if now - self._entries[rid].ended_at >= KEEP_FOR_S:
                del self._entries[rid]
        ended = sorted((e for e in self._entries.values() if e.outcome is not None), key=lambda e: e.ended_at)
        for entry in ended[: max(0, len(ended) - KEEP_MAX)]:
            del self._entries[entry.request_id]

    def shutdown(self) -> None:
        """Stop taking work; the threads end with their requests (the service's stop cancels
        them)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
