"""Fetches as background tasks of the server: start (planned synchronously, so refusals are
immediate), status snapshots, cancel, and an event log the API streams (ids increase by one).

One fetch per target folder at a time; fetches of different repos run side by side. Nothing here
knows HTTP; the state lives for the server's life (a fetch cut by a restart resumes when started
again, from the files kept in its staging folder).
"""

from __future__ import annotations

import datetime
import logging
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from lorastudio.basemodels.events import FetchEvent, FetchFailed
from lorastudio.basemodels.fetch import FetchPlan, plan_fetch, run_fetch, staging_folder
from lorastudio.basemodels.fetch_lock import FetchLock
from lorastudio.basemodels.hubaccess import scrub
from lorastudio.errors import (
    ConfigError,
    FieldProblem,
    JobActive,
    LorastudioError,
    ModelSourceError,
    NoSpaceLeft,
    NotFound,
)
from lorastudio.event_log import EventLog
from lorastudio.settings import Settings, hub_token_problem

MAX_EVENTS = 2000
MAX_ENDED = 100  # ended fetches kept (the oldest go first); running ones are all kept
log = logging.getLogger(__name__)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


@dataclass
class Fetch:
    """The state of one fetch (see `snapshot` for its JSON view)."""

    id: str
    plan: FetchPlan
    status: str = "running"  # running | completed | failed | cancelled
    files_done: int = 0
    bytes_done: int = 0
    model_id: str | None = None
    path: str | None = None
    error: str | None = None
    resumable: bool = False
    already_present: bool = False
    created_at: str = field(default_factory=_now)
    finished_at: str | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    settings: Settings | None = None  # the manager's, with this fetch's own hub token if it has one

    def snapshot(self) -> dict[str, Any]:
        plan = self.plan
        return {
            "id": self.id,
            "repo_id": plan.repo_id,
            "revision": plan.revision,
            "status": self.status,
            "commit": plan.commit,
            "family": plan.family,
            "files_done": self.files_done,
            "files_total": len(plan.files or {}),
            "bytes_done": self.bytes_done,
            "bytes_total": plan.bytes_total,
            "model_id": self.model_id,
            "path": self.path,
            "error": self.error,
            "resumable": self.resumable,
            "already_present": self.already_present,
            "offline": plan.offline,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
        }


class FetchManager:
    """The server's fetches. Thread-safe."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._lock = threading.Lock()
        self._fetches: dict[str, Fetch] = {}
        self._log = EventLog(MAX_EVENTS)

    def start(self, repo_id: str, revision: str | None = None, token: str | None = None) -> dict[str, Any]:
        """Plan the fetch now (raising its refusals: ConfigError, ModelAccessDenied, NotFound,
        ModelSourceError), then download in a background thread. Returns the fetch's snapshot.
        `token`: a hub token for this fetch only (a gated repo the studio's token cannot read),
        used instead of settings.hf_token, kept in memory for the download and never stored.
        Raises JobActive when the same model is being fetched already (by this server, or by
        another process: basemodels/fetch_lock.py), ConfigError (field
        "token") for a token no HTTP header can carry (settings.hub_token_problem; surrounding
        whitespace is dropped first)."""
        settings = self.settings
        token = token.strip() if token else None  # a pasted token's newline or spaces
        if token:
            if problem := hub_token_problem(token):
                raise ConfigError([FieldProblem("token", problem)])
            settings = settings.model_copy(update={"hf_token": SecretStr(token)})
        plan = plan_fetch(settings, repo_id, revision)
        fetch = Fetch(uuid.uuid4().hex[:12], plan, settings=settings)
        with self._lock:
            busy = next(
                (f for f in self._fetches.values() if f.status == "running" and f.plan.target == plan.target),
                None,
            )
            if busy is not None:
                raise JobActive(f"{repo_id} is being fetched already (fetch {busy.id})")
            # another process's fetch of it (another server, `models fetch`): 409 now, not a
            # failed fetch later; the thread's run_fetch releases it
            lock = FetchLock(plan.target, repo_id) if plan.present is None else None
            self._fetches[fetch.id] = fetch
        fetch.thread = threading.Thread(
            target=self._run, args=(fetch, lock), name=f"fetch-{fetch.id}", daemon=True
        )
        fetch.thread.start()
        return fetch.snapshot()

    def _run(self, fetch: Fetch, lock: FetchLock | None) -> None:
        try:
            outcome = run_fetch(
                fetch.settings or self.settings,
                fetch.plan,
                fetch_id=fetch.id,
                emit=self._ingest,
                cancel=fetch.cancel,
                lock=lock,
            )
        except LorastudioError as err:
            kept = isinstance(err, ModelSourceError | NoSpaceLeft)
            self._fail(fetch, str(err), kept and staging_folder(fetch.plan.target).is_dir())
            return
        except Exception as err:  # noqa: BLE001 (an unforeseen failure must still end the fetch)
            # the thread ends here: without this the fetch stayed "running" for the server's
            # life, its model neither fetchable again (409) nor deletable
            token = (fetch.settings or self.settings).hf_token
            message = scrub(
                f"the fetch of {fetch.plan.repo_id} failed: {type(err).__name__}: {err}",
                token.get_secret_value() if token else None,
            )
            log.error("fetch %s: %s", fetch.id, message)  # no traceback: its frames hold the token
            self._fail(fetch, message, staging_folder(fetch.plan.target).is_dir())
            return
        finally:
            if lock is not None:
                lock.release()  # run_fetch released it, unless it raised before taking it over
        with self._lock:
            fetch.status = outcome.status
            fetch.model_id, fetch.path = outcome.model_id, outcome.path
            fetch.already_present = outcome.already_present
            fetch.resumable = outcome.status == "cancelled"
            fetch.finished_at = _now()
            self._forget_oldest_ended()

    def _forget_oldest_ended(self) -> None:
        """Keep MAX_ENDED ended fetches (under self._lock): every POST of a model on disk
        already is a fetch, and GET /api/models/fetch lists them all."""
        ended = [k for k, f in self._fetches.items() if f.status != "running"]
        for key in ended[: max(0, len(ended) - MAX_ENDED)]:
            del self._fetches[key]

    def _fail(self, fetch: Fetch, message: str, resumable: bool) -> None:
        """End `fetch` as failed with `message` (event and state)."""
        self._ingest(FetchFailed(fetch_id=fetch.id, message=message, resumable=resumable))
        with self._lock:
            fetch.status, fetch.error, fetch.resumable = "failed", message, resumable
            fetch.finished_at = _now()
            self._forget_oldest_ended()

    def _ingest(self, event: FetchEvent) -> None:
        data = event.model_dump(mode="json")
        with self._lock:
            fetch = self._fetches.get(event.fetch_id)
            if fetch is not None and "bytes_done" in data:
                fetch.files_done, fetch.bytes_done = data["files_done"], data["bytes_done"]
            self._log.append(data)

    def get(self, fetch_id: str) -> dict[str, Any]:
        """The snapshot of a fetch of this server's life. Raises NotFound."""
        with self._lock:
            if fetch_id not in self._fetches:
                raise NotFound(f"no fetch with id {fetch_id!r} in this server's life")
            return self._fetches[fetch_id].snapshot()

    def list(self) -> list[dict[str, Any]]:
        """The fetches of this server's life, oldest first: every running one and the latest
        MAX_ENDED that ended."""
        with self._lock:
            return [f.snapshot() for f in self._fetches.values()]

    def cancel(self, fetch_id: str) -> dict[str, Any]:
        """Ask a running fetch to stop (it ends "cancelled" at its next chunk or file; files done
        are kept for a resume). Returns its snapshot. Raises NotFound (also when it has ended)."""
        with self._lock:
            fetch = self._fetches.get(fetch_id)
            if fetch is None or fetch.status != "running":
                raise NotFound(f"no running fetch with id {fetch_id!r}")
            fetch.cancel.set()
            return fetch.snapshot()

    def wait(self, fetch_id: str, timeout: float | None = None) -> dict[str, Any]:
        """Wait for a fetch's thread to end (tests, shutdown); returns its snapshot."""
        with self._lock:
            fetch = self._fetches.get(fetch_id)
        if fetch is None:
            raise NotFound(f"no fetch with id {fetch_id!r} in this server's life")
        if fetch.thread is not None:
            fetch.thread.join(timeout)
        return self.get(fetch_id)

    def busy_folders(self) -> set[Path]:
        """Target folders of the running fetches (not to be deleted)."""
        with self._lock:
            return {f.plan.target for f in self._fetches.values() if f.status == "running"}

    @property
    def event_seq(self) -> int:
        return self._log.seq

    def events_after(self, seq: int) -> list[tuple[int, dict[str, Any]]]:
        """Events with id > seq, oldest first (the log keeps the latest MAX_EVENTS)."""
        return self._log.after(seq)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Cancel every running fetch and wait for their threads."""
        with self._lock:
            running = [f for f in self._fetches.values() if f.status == "running"]
        for fetch in running:
            fetch.cancel.set()
        for fetch in running:
            if fetch.thread is not None:
                fetch.thread.join(timeout)
