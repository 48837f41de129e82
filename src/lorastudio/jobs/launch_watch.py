"""The hang watch of a `lorastudio train --gpus N` launch, the launching command's side (no
torch, no HTTP): the job service's watch (jobs/step_watch.py, jobs/rank_silence.py) on the
ranks of a CLI launch.

The job service hears its ranks through their channel (jobs/launcher.py); a CLI launch's ranks
are `lorastudio train` commands of their own, so the launching command listens on a unix socket
in the launch's private folder (LAUNCH_DIR_ENV, mode 0700: jobs/launch_report.py) and each rank
connects to it (jobs/rank_watch.py), with the channel's framing (jobs/channel.py):

  rank -> command   {"kind": "hello", "rank": r, "pid": p}
  rank -> command   {"kind": "beat"} at its stop polls (at most every BEAT_EVERY_S)
  rank 0 -> command {"kind": "event", "data": {"type": ..., ...}}: each engine event's type (a
                    progress event's step) and the busy messages of jobs/busy.py
  command -> rank 0 {"kind": "stop", "save": true}: the hang stop

`LaunchWatch.hung(now)` is StepWatch.overdue on what rank 0 reported, with the RankSilence note
of which ranks went silent, as the service's pump says it (jobs/pump.py); the launch then stops
the run as the service does (cli/train_launch.py). A rank that never connects (an old socket
path, a full folder) is simply not heard: the watch judges by rank 0's events, as before the
beats. Only what a rank sends in JSON is read.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lorastudio.jobs.channel import ChannelError, read_hello, recv_json, send_json
from lorastudio.jobs.process import Timeouts
from lorastudio.jobs.rank_silence import RankSilence
from lorastudio.jobs.records import JobStatus
from lorastudio.jobs.step_watch import StepWatch

log = logging.getLogger("lorastudio.jobs")

WATCH_SOCKET = "watch.sock"  # in the launch's folder (LAUNCH_DIR_ENV)
ACCEPT_POLL_S = 0.2


@dataclass
class WatchedRun:
    """What the step watch needs of a run (the job service's Job has the same fields): its status
    (preparing until rank 0's first step), the work in flight (jobs/busy.py), whether a stop was
    asked for, the steps run."""

    status: JobStatus = JobStatus.PREPARING
    busy: dict[str, Any] | None = None
    busy_changed_at: float | None = None
    stop_save: bool | None = None
    steps_run: int = 0
    saw: deque[str] = field(default_factory=lambda: deque(maxlen=16))  # the last event types seen

    def fold(self, data: dict[str, Any], now: float) -> None:
        """Note rank 0's event or busy message `data` at `now` (as jobs/ingest.fold_event does)."""
        kind = data.get("type")
        self.saw.append(str(kind))
        if kind == "progress":
            self.status = JobStatus.RUNNING
            self.steps_run = max(self.steps_run, int(data.get("step") or 0))
        elif kind == "busy":
            work = data.get("work")
            self.busy = None if work is None else {"work": str(work), "step": data.get("step")}
            self.busy_changed_at = now
        elif kind in ("complete", "error"):
            self.status = JobStatus.COMPLETED if kind == "complete" else JobStatus.FAILED


class LaunchWatch:
    """The step watch and rank beats of one CLI launch. `start()` before the launch, `hung(now)`
    while it runs, `close()` after."""

    def __init__(self, folder: Path, world_size: int, timeouts: Timeouts):
        self.path = folder / WATCH_SOCKET
        self.world_size = world_size
        self.watch = StepWatch(timeouts.hang_min_s, timeouts.hang_step_factor)
        self.silence = RankSilence(world_size)
        self.run = WatchedRun()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._sockets: dict[int, socket.socket] = {}
        self._pids: dict[int, int] = {}
        self._closed = False

    def start(self) -> LaunchWatch:
        """Listen at `path` (the ranks connect once they start). Raises OSError."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.path))
        listener.listen(self.world_size)
        listener.settimeout(ACCEPT_POLL_S)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), name="lorastudio-watch", daemon=True).start()
        return self

    def _accept(self, listener: socket.socket) -> None:
        accepted = 0
        while accepted < self.world_size and not self._closed:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            conn.settimeout(None)
            threading.Thread(
                target=self._serve, args=(conn,), name="lorastudio-watch-rank", daemon=True
            ).start()
            accepted += 1

    def _serve(self, conn: socket.socket) -> None:
        """Read one rank's messages to the end of its connection."""
        rank: int | None = None
        try:
            rank, pid = read_hello(conn)
            with self._lock:
                self._sockets[rank], self._pids[rank] = conn, pid
            self.silence.heard(rank, pid)
            while (message := recv_json(conn)) is not None:
                self.saw(rank, message, time.monotonic())
        except (OSError, ChannelError, KeyError, TypeError, ValueError) as err:
            log.debug("rank %s watch channel: %s", rank, err)
        finally:
            with contextlib.suppress(OSError):
                conn.close()

    def saw(self, rank: int, message: dict[str, Any], now: float) -> None:
        """Note `message` of `rank` at `now`: every message says the rank answers; rank 0's
        events feed the step watch."""
        self.silence.heard(rank, now=now)
        data = message.get("data")
        if message.get("kind") == "event" and rank == 0 and isinstance(data, dict):
            with self._lock:
                self.watch.saw(data, now)
                self.run.fold(data, now)

    def hung(self, now: float) -> str | None:
        """Why the launch counts as hung at `now` (StepWatch.overdue, with the ranks that went
        silent as jobs/pump.py names them), or None; None too once a stop was asked for."""
        with self._lock:
            reason = self.watch.overdue(self.run, now)
            allowance = self.watch.allowance_s()
        if reason is None:
            return None
        ranks = self.silence.note(allowance, now=now)
        return f"{reason} ({ranks})" if ranks else reason

    def request_stop(self) -> None:
        """Ask rank 0 for a stop-and-save (every rank agrees on its answer at its next poll)."""
        with self._lock:
            self.run.stop_save = True
            conn = self._sockets.get(0)
        if conn is not None:
            with contextlib.suppress(OSError):
                send_json(conn, {"kind": "stop", "save": True})

    @property
    def rank_pids(self) -> dict[int, int]:
        """rank -> pid of every rank that connected."""
        with self._lock:
            return dict(self._pids)

    def close(self) -> None:
        self._closed = True
        with self._lock:
            sockets = [self._listener, *self._sockets.values()]
        for sock in sockets:
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()
