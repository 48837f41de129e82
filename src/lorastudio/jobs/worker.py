"""The training worker: the child process that runs one training job.

This is the only module that imports the training engine (lazily, inside the child). The child:
1. binds itself to the server's lifetime: on Linux, prctl(PR_SET_PDEATHSIG, SIGKILL) through
   ctypes, plus a watchdog thread that exits when the parent pid changes (other systems, and
   the race where the parent died before prctl);
2. starts with an environment without secrets (jobs/childenv.py: the server dropped them before
   it started anything); a run from a hub id gets the hub token from its settings, held in
   memory for its hub calls' `token=` (lorastudio/hub_token.py), never in its environment;
3. keeps its own lines (stdout, stderr, log records, a line per engine event other than
   progress) in logs/<job id>.log (jobs/worker_log.py), still copied to the server's terminal;
4. starts the page-cache prefetch of the run's weight files (jobs/prefetch.py), beside the
   engine's imports;
5. calls `lorastudio.training.loop.train(cfg, emit, should_stop, settings=..., resume=...)`
   (resume: the checkpoint folder of a resumed run, else None), sending every
   event to the parent tagged with (generation, pid) so the parent can ignore events of a
   superseded process; a failure the engine did not report becomes an Error event.

A one-GPU job of the server usually runs in a standby worker (jobs/standby.py): a process spawned
in advance that bound itself to the server and imported the engine before its job came; it then
calls `worker_main` with the job's args as a fresh process would (step 1 is done once).

The parent must start this process from a thread that lives as long as the server: the death
signal fires when the *thread* that forked the child exits.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lorastudio.config import TrainConfig
from lorastudio.errors import LorastudioError
from lorastudio.import_freeze import freeze_imports
from lorastudio.jobs.busy import BusyTracker
from lorastudio.jobs.childenv import give_hub_token
from lorastudio.jobs.diskspace import explain_write_failure, output_folder
from lorastudio.jobs.prefetch import start_prefetch
from lorastudio.jobs.worker_log import WorkerLog, log_path
from lorastudio.processes import exit_worker
from lorastudio.settings import Settings
from lorastudio.training.events import Complete, Error, Event, StopRequest

PR_SET_PDEATHSIG = 1
WATCHDOG_PERIOD_S = 0.5
log = logging.getLogger("lorastudio.worker")


@dataclass(frozen=True)
class WorkerArgs:
    """What the child needs (picklable). settings carries no API token; its hf_token is how the
    hub token reaches the worker, its wandb_api_key how the W&B key does (not the environment:
    jobs/childenv.py)."""

    job_id: str
    generation: int
    config: TrainConfig
    settings: Settings
    parent_pid: int
    resume: str | None = None  # checkpoint folder to continue from (a resumed run)
    # when a standby worker (jobs/standby.py) was handed this job (host_clock.host_now()); None: a fresh
    # process, whose own start counts (the run's process_start phase)
    started_at: float | None = None


_bound_to: int | None = None  # the parent this process is bound to (a standby binds before its job)


def bind_to_parent(parent_pid: int) -> None:
    """Die with the parent: a kernel death signal where available, and a watchdog thread.
    Once per process (a standby worker binds at its start; its job's prepare_child again)."""
    global _bound_to
    if _bound_to == parent_pid:
        return
    _bound_to = parent_pid
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            print(f"[worker] prctl(PR_SET_PDEATHSIG) failed: {os.strerror(err)}", file=sys.stderr)
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(3)
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="parent-watchdog", daemon=True).start()


def ignore_terminal_interrupt() -> None:
    """In a child of the server (training, generation and caption worker; multi-GPU ranks):
    ignore SIGINT (not the torchrun agent, which the CLI's data-parallel runs use too). A Ctrl-C in the server's terminal reaches the whole process group;
    the server's own shutdown stops its children (a running job is marked interrupted), so a
    child must not die of it first, mid-step, with a KeyboardInterrupt traceback. SIGHUP likewise:
    the terminal's hangup reaches the group too, and the server stops on it as on a Ctrl-C
    (api/app._stopping_server); a worker killed by it first saved nothing."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(WATCHDOG_PERIOD_S)
        if os.getppid() != parent_pid:
            os._exit(3)


class WorkerChannel:
    """The child's side of the channel: emit (events tagged (generation, pid)) and should_stop
    (reads the shared stop flag) for the engine; close() flushes before exit."""

    def __init__(self, args: WorkerArgs, events: Any, stop_event: Any, stop_save: Any):
        self._tag = (args.generation, os.getpid())
        self._folder = output_folder(args.settings.outputs_dir, args.config.output_name)
        self._busy = BusyTracker(args.config)  # work a stop must wait for (jobs/busy.py)
        self._events = events
        self._stop_event = stop_event
        self._stop_save = stop_save
        self.terminal_sent = False

    def emit(self, event: Event) -> None:
        if isinstance(event, Error):  # a full disk is said so, not in torch's words
            event = Error(message=explain_write_failure(event.message, self._folder))
        if isinstance(event, Complete | Error):
            self.terminal_sent = True
        if isinstance(event, Error):  # an ERROR, in words (RELIABILITY 1905): the terminal shows it too
            log.error("error: %s", event.message)
        elif event.type != "progress":  # the log shows the run's course; metrics are stored apart
            log.info("%s: %s", event.type, event.model_dump_json(exclude={"type"}))
        self._events.put((*self._tag, event.model_dump(mode="python")))
        self._send_busy(self._busy.after_event(event))

    def should_stop(self) -> StopRequest | None:
        request = StopRequest(save=bool(self._stop_save.value)) if self._stop_event.is_set() else None
        self._send_busy(self._busy.after_poll(request))
        return request

    def _send_busy(self, message: dict[str, Any] | None) -> None:
        if message is not None:
            self._events.put((*self._tag, message))

    def close(self) -> None:
        """Flush every queued event to the parent before the process exits."""
        self._events.close()
        self._events.join_thread()


def prepare_child(args: WorkerArgs) -> None:
    """What every worker does first: bind to the parent's lifetime; the hub token (from its
    settings, never its environment) held in memory where the run needs the hub
    (jobs/childenv.give_hub_token)."""
    bind_to_parent(args.parent_pid)
    ignore_terminal_interrupt()  # the server stops its children itself
    give_hub_token(args.settings, args.config.base_model)


def worker_main(args: WorkerArgs, events: Any, stop_event: Any, stop_save: Any) -> None:
    """Child entry point (multiprocessing spawn target). Exits 0 when the engine returned,
    1 when it failed (after an Error event), 3 when the parent is gone; an unexpected
    exception is reported as an Error event and its traceback logged once (the run's log and
    the server's terminal), then the process exits 1: it is not raised on to the spawn
    bootstrap, which printed the traceback a second time (RELIABILITY 1900)."""
    prepare_child(args)
    worker_log = start_log(args)
    prefetch = start_prefetch(args.config.model_dump(), args.settings)  # beside the imports below
    channel = WorkerChannel(args, events, stop_event, stop_save)
    emit = prefetch.wrap(channel.emit) if prefetch is not None else channel.emit
    code = 0
    try:
        from lorastudio.timings import process_started_at
        from lorastudio.training.loop import train

        frozen = freeze_imports()  # a standby froze its imports already; this adds what came since
        log.info("imports frozen out of the garbage collector's passes: %d objects", frozen)
        resume = Path(args.resume) if args.resume is not None else None
        train(
            args.config,
            emit,
            channel.should_stop,
            settings=args.settings,
            resume=resume,
            # the forecast counts this process's start (imports); a standby's from its hand-over
            started_at=args.started_at if args.started_at is not None else process_started_at(),
            run_id=args.job_id,  # in a fresh run's mark: a later clean-up's note goes to this job's record
        )
    except LorastudioError as err:
        if not channel.terminal_sent:
            channel.emit(Error(message=str(err)))
        code = 1
    except BaseException as err:
        if not channel.terminal_sent:
            channel.emit(Error(message=f"{type(err).__name__}: {err}"))
        # the traceback once, in the run's log and on the terminal (its tee); not raised on: the
        # spawn bootstrap (multiprocessing's, under a standby too) printed it again on the
        # server's console (RELIABILITY 1900)
        log.exception("the worker failed")
        code = 1
    if prefetch is not None:
        prefetch.stop()
    channel.close()
    # Exit at once: the run's files are written and its events flushed; the interpreter's
    # teardown (torch, CUDA) would only delay handing the GPU back.
    if worker_log is not None:
        worker_log.close()
    exit_worker(code)  # stdout / stderr flushed, semaphores unlinked (RELIABILITY 2121)


def start_log(args: WorkerArgs) -> WorkerLog | None:
    """The run's log (jobs/worker_log.py); None, with a line on stderr, when its file cannot be
    opened (the run goes on: the log is a copy of what the terminal shows)."""
    try:
        return WorkerLog(log_path(args.settings, args.job_id)).start()
    except OSError as err:
        print(f"[worker] the run's log could not be opened: {err}", file=sys.stderr)
        return None
