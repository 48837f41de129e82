"""The hang watch of a `lorastudio train --gpus N` launch, a rank's side (no torch): what a job
service's rank tells its launcher (jobs/rank_worker.py RankChannel), told to the launching
command (jobs/launch_watch.py): a hello (rank, pid), a beat at its stop polls (at most every
BEAT_EVERY_S: it still answers), and from rank 0 each event's type and the busy messages of
jobs/busy.py (the work between two steps that the watch does not time). The command's one
message is the hang stop, a stop-and-save that rank 0's stop check returns from then on.

Watching is never a reason to fail a run: a rank that cannot connect (no launch folder, no
socket) or whose command's end closed trains on unwatched (it dies with the launch anyway:
cli/train_launch.bind_to_agent).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lorastudio.config import TrainConfig
from lorastudio.jobs.busy import BusyTracker
from lorastudio.jobs.channel import ChannelError, recv_json, send_json
from lorastudio.jobs.launch_report import LAUNCH_DIR_ENV
from lorastudio.jobs.launch_watch import WATCH_SOCKET
from lorastudio.jobs.rank_silence import BeatClock
from lorastudio.training.events import Event, Progress, StopRequest

StopCheck = Callable[[], StopRequest | None]
Emit = Callable[[Event], None]


class RankWatch:
    """One rank's connection to the launching command's watch. `wrap_emit` (rank 0) and
    `wrap_check` (every rank) put it between the engine and the command's own sink and check."""

    def __init__(self, sock: socket.socket, rank: int, config: TrainConfig):
        self._sock = sock
        self._rank = rank
        self._busy = BusyTracker(config) if rank == 0 else None
        self._lock = threading.Lock()
        self._stop: StopRequest | None = None
        self._beats = BeatClock()
        self._broken = False

    def listen(self) -> RankWatch:
        threading.Thread(target=self._read, name="lorastudio-rank-watch", daemon=True).start()
        return self

    def _read(self) -> None:
        with contextlib.suppress(OSError, ChannelError, KeyError, TypeError):
            while (message := recv_json(self._sock)) is not None:
                if message["kind"] == "stop":
                    self._stop = StopRequest(save=bool(message.get("save")))

    def wrap_emit(self, emit: Emit) -> Emit:
        """`emit`, then (rank 0) the event's type and what busy work follows it, to the command."""

        def watched(event: Event) -> None:
            emit(event)
            if self._busy is None:
                return
            data: dict[str, Any] = {"type": event.type}
            if isinstance(event, Progress):
                data["step"] = event.step
            self._send({"kind": "event", "data": data})
            self._send_busy(self._busy.after_event(event))

        return watched

    def wrap_check(self, check: StopCheck) -> StopCheck:
        """`check`, or the command's hang stop once it asked; a beat at most every BEAT_EVERY_S."""

        def watched() -> StopRequest | None:
            request = check() or self._stop
            if self._busy is not None:
                self._send_busy(self._busy.after_poll(request))
            if self._beats.due():
                self._send({"kind": "beat"})
            return request

        return watched

    def _send_busy(self, message: dict[str, Any] | None) -> None:
        if message is not None:
            self._send({"kind": "event", "data": message})

    def _send(self, message: dict[str, Any]) -> None:
        if self._broken:
            return
        with self._lock:
            try:
                send_json(self._sock, message)
            except OSError:  # the command is gone: the launch ends with it
                self._broken = True

    def answered(self) -> None:
        """A rank's run says nothing of a hang stop: its launching command does."""

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()


def connect_rank_watch(rank: int, config: TrainConfig) -> RankWatch | None:
    """In a rank of a CLI launch: the watch's connection, hello sent; None when this process is
    no such rank or the command's watch cannot be reached."""
    folder = os.environ.get(LAUNCH_DIR_ENV)
    if not folder or not (path := Path(folder) / WATCH_SOCKET).exists():
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
        send_json(sock, {"kind": "hello", "rank": rank, "pid": os.getpid()})
    except OSError:
        sock.close()
        return None
    return RankWatch(sock, rank, config).listen()
