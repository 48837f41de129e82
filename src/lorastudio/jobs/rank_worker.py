"""One rank of a data-parallel training job: `python -m lorastudio.jobs.rank_worker`, started by
torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT set) under the job service's agent
(jobs/agent.py, which sets LORASTUDIO_AGENT_PID) with the service's socket in
LORASTUDIO_RANK_CHANNEL (jobs/channel.py).

The rank:
1. binds itself to the agent's lifetime (PR_SET_PDEATHSIG + watchdog, as the single worker does
   with the server): the agent dies with the server, so every rank does too;
2. connects to the service, says hello (rank, pid) and receives its RankJob; a reader thread
   takes stop requests (rank 0) and exits the process at once if the service's end closes;
3. takes the hub token from its job's settings where the run needs it (jobs/childenv.py; its
   environment has no secrets), then runs `train()`. Rank 0 sends every event tagged
   (generation, agent pid), the identity the service fences on; the engine keeps the other
   ranks silent. Every rank reports "done" (exit code, error) just before it exits: a
   connection that closes without it tells the service the rank died.
"""

from __future__ import annotations

import os
import pickle
import socket
import sys
import threading
from pathlib import Path

from lorastudio.errors import LorastudioError
from lorastudio.import_freeze import freeze_imports
from lorastudio.jobs.busy import BusyTracker
from lorastudio.jobs.channel import (
    AGENT_PID_ENV,
    CHANNEL_ENV,
    ChannelError,
    RankJob,
    recv_frame,
    recv_json,
    send_json,
)
from lorastudio.jobs.childenv import give_hub_token
from lorastudio.jobs.diskspace import explain_write_failure, output_folder
from lorastudio.jobs.rank_silence import BeatClock
from lorastudio.jobs.worker import bind_to_parent, ignore_terminal_interrupt, start_log
from lorastudio.processes import exit_worker
from lorastudio.training.events import Complete, Error, Event, StopRequest

EXIT_SERVICE_GONE = 3


class RankChannel:
    """A rank's side of the socket: emit (rank 0 only; events tagged), should_stop (the latest
    stop request from the service), done (the last message)."""

    def __init__(self, sock: socket.socket, tag: tuple[int, int], rank: int, folder: Path, busy: BusyTracker):
        self._sock = sock
        self._folder = folder  # the run's output folder (named by a full disk's error)
        self._busy = busy  # rank 0: work a stop must wait for (jobs/busy.py)
        self._tag = tag
        self._rank = rank
        self._send_lock = threading.Lock()
        self._stop: StopRequest | None = None
        self.terminal_sent = False
        self._beats = BeatClock()

    def listen(self) -> None:
        """Start the reader thread: stop requests set the flag; the end of the connection (the
        service killed the job or is gone) ends this process."""
        threading.Thread(target=self._read, name="rank-channel", daemon=True).start()

    def _read(self) -> None:
        try:
            while (message := recv_json(self._sock)) is not None:
                if message["kind"] == "stop":
                    self._stop = StopRequest(save=bool(message.get("save")))
        except (OSError, ChannelError) as err:
            print(f"[rank {self._rank}] channel to the job service broke: {err}", file=sys.stderr)
        os._exit(EXIT_SERVICE_GONE)

    def emit(self, event: Event) -> None:
        if self._rank != 0:
            return
        if isinstance(event, Error):  # a full disk is said so, not in torch's words
            event = Error(message=explain_write_failure(event.message, self._folder))
        if isinstance(event, Complete | Error):
            self.terminal_sent = True
        self._send({"kind": "event", "item": [*self._tag, event.model_dump(mode="json")]})
        self._send_busy(self._busy.after_event(event))

    def should_stop(self) -> StopRequest | None:
        """The latest stop request (every rank polls; rank 0's answer is the run's), and a
        beat to the launcher at most every BEAT_EVERY_S: this rank still answers (jobs/rank_silence.py)."""
        request = self._stop
        if self._rank == 0:
            self._send_busy(self._busy.after_poll(request))
        if self._beats.due():
            self._send({"kind": "beat"})
        return request

    def _send_busy(self, message: dict | None) -> None:
        if message is not None:
            self._send({"kind": "event", "item": [*self._tag, message]})

    def done(self, code: int, message: str | None) -> None:
        self._send({"kind": "done", "code": code, "message": message})

    def _send(self, message: dict) -> None:
        with self._send_lock:
            send_json(self._sock, message)


def connect(path: str, rank: int) -> tuple[socket.socket, RankJob]:
    """Connect to the service at `path`, say hello, receive the job. Raises OSError,
    ChannelError (the service closed before sending it)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    send_json(sock, {"kind": "hello", "rank": rank, "pid": os.getpid()})
    body = recv_frame(sock)
    if body is None:
        raise ChannelError("the job service closed the channel before sending the job")
    job = pickle.loads(body)  # noqa: S301 (the job service, our parent's parent, wrote it)
    if not isinstance(job, RankJob):
        raise ChannelError(f"expected a RankJob, got {type(job).__name__}")
    return sock, job


def run_rank(job: RankJob, channel: RankChannel) -> tuple[int, str | None]:
    """Train; returns (exit code, error message or None). Rank 0 reports an unreported failure
    as an Error event. Exceptions other than LorastudioError are reported, then re-raised."""
    from lorastudio.timings import process_started_at
    from lorastudio.training.loop import train

    freeze_imports()  # a rank process's own: no collection scans the libraries again
    args = job.args
    resume = Path(args.resume) if args.resume is not None else None
    try:
        train(
            args.config,
            channel.emit,
            channel.should_stop,
            settings=args.settings,
            resume=resume,
            device=job.device,
            started_at=process_started_at(),  # the run's wall-time record counts the rank's start
            run_id=args.job_id,  # in a fresh run's mark (rank 0 claims the folder)
        )
    except LorastudioError as err:
        if not channel.terminal_sent:
            channel.emit(Error(message=str(err)))
        return 1, str(err)
    except BaseException as err:
        message = f"{type(err).__name__}: {err}"
        if not channel.terminal_sent:
            channel.emit(Error(message=message))
        channel.done(1, message)
        raise
    return 0, None


def main() -> None:
    """Entry point under torchrun. Exits with the run's code (0 done, 1 failed, 3 service gone)."""
    bind_to_parent(int(os.environ[AGENT_PID_ENV]))
    ignore_terminal_interrupt()  # the server stops its children itself
    rank = int(os.environ["RANK"])
    sock, job = connect(os.environ[CHANNEL_ENV], rank)
    give_hub_token(job.args.settings, job.args.config.base_model)
    # rank 0's own lines are the run's log, as a one-process worker's (jobs/worker_log.py)
    worker_log = start_log(job.args) if rank == 0 else None
    folder = output_folder(job.args.settings.outputs_dir, job.args.config.output_name)
    channel = RankChannel(sock, job.tag, rank, folder, BusyTracker(job.args.config))
    channel.listen()
    code, message = run_rank(job, channel)
    channel.done(code, message)
    # Exit at once: files are written and events sent; interpreter teardown only delays freeing
    # the GPU (the service kills what is left of the job once rank 0 is done).
    if worker_log is not None:
        worker_log.close()
    exit_worker(code)  # stdout / stderr flushed, semaphores unlinked (RELIABILITY 2121)


if __name__ == "__main__":
    main()
