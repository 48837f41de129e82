"""The job service's handle on a data-parallel job (num_gpus > 1): one torchrun launch, with the
same interface as a single spawned worker (jobs/process.py JobWorker). No torch here.

    python -m lorastudio.jobs.agent SERVER_PID --standalone --nnodes 1 --nproc-per-node N
        --max-restarts 0 -m lorastudio.jobs.rank_worker

The agent is torchrun's own launcher bound to the server's lifetime (jobs/agent.py); it starts N
ranks (jobs/rank_worker.py) with CUDA_VISIBLE_DEVICES = the GPUs the arbiter reserved (or none:
gloo ranks on the CPU). Every rank connects to a unix socket this class listens on
(jobs/channel.py): rank 0's events arrive tagged (generation, agent pid), exactly what a single
worker sends, so the service's ingestion is unchanged; stop requests go to rank 0, whose stop
poll every rank agrees on.

Failure handling, faster than torchrun's own teardown (it gives ranks 30 s after SIGTERM):
- a rank's connection that ends without "done" is a dead rank (kill -9, crash, out of memory):
  every process of the job is killed at once and an Error event naming the rank (or the agent,
  when it died first) ends the job, unless another rank reported a failure ("done", non-zero)
  while every other rank still ran: that report is the cause. torchrun SIGTERMs every other rank
  the moment one exits with an error, and the others' collectives break when a rank dies: what
  follows the first failure is its consequence;
- a rank other than 0 that fails with an error: rank 0 has ABORT_GRACE_S to report it (it
  usually sees the broken collective), else the job ends with that rank's error;
- once rank 0 is done, whatever is left after ABORT_GRACE_S is killed (the run is over).
`exitcode` stays None until the agent and every rank process are gone, so the job service starts
the next job only on free GPUs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import queue
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from lorastudio.config import TrainConfig
from lorastudio.jobs.channel import ChannelError, RankJob, read_hello, recv_json, send_frame, send_json
from lorastudio.jobs.process import TaggedEvent, Timeouts, escalate
from lorastudio.jobs.rank_silence import RankSilence
from lorastudio.jobs.torchrun_launch import kill_quietly, rank_environment, torchrun_command
from lorastudio.jobs.worker import WorkerArgs
from lorastudio.processes import keep_working_folder, process_alive, process_ending
from lorastudio.settings import Settings
from lorastudio.training.events import Error

log = logging.getLogger("lorastudio.jobs")

ABORT_GRACE_S = 2.0
ACCEPT_POLL_S = 0.2


class TorchrunWorker:
    """A torchrun launch of one job. Create, `start()`, read with `next_event`, then `close()`."""

    def __init__(
        self,
        job_id: str,
        generation: int,
        config: TrainConfig,
        settings: Settings,
        *,
        devices: tuple[int, ...] | None,
        resume: Path | None = None,
    ):
        """devices: the reserved GPU indices, one per rank; None: config.num_gpus gloo ranks on
        the CPU (settings.cpu_data_parallel). resume: the checkpoint folder of a resumed run."""
        self.generation = generation
        self.world_size = config.num_gpus
        if devices is not None and len(devices) != self.world_size:
            raise ValueError(f"{len(devices)} devices reserved for num_gpus={self.world_size}")
        self._devices = devices
        self._args = WorkerArgs(
            job_id=job_id,
            generation=generation,
            config=config,
            settings=settings.model_copy(update={"api_token": None}),
            parent_pid=os.getpid(),
            resume=str(resume) if resume is not None else None,
        )
        self._events: queue.Queue[TaggedEvent] = queue.Queue()
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._agent: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None
        self._listener: socket.socket | None = None
        self._ranks: dict[int, int] = {}  # rank -> pid
        self._silence = RankSilence(self.world_size)  # when each rank was last heard from
        self._sockets: dict[int, socket.socket] = {}
        self._done: dict[int, tuple[int, str | None]] = {}  # rank -> (code, message)
        self._readers = 0  # rank connections still being read
        self._accepting = False
        self._stop_save: bool | None = None
        self._ending = False  # the service or this class is ending the job: EOFs are expected
        self._failure: str | None = None  # why this class ended the job
        self._first: tuple[str, int] | None = None  # the first failure seen: ("failed" | "lost", rank)

    # -- start -----------------------------------------------------------------------------------
    def start(self) -> int:
        """Listen, then start the agent; returns its pid. Raises OSError if it cannot start."""
        self._dir = Path(tempfile.mkdtemp(prefix="lorastudio-ranks-"))  # mode 0700
        path = self._dir / "channel.sock"
        try:
            self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._listener.bind(str(path))
            self._listener.listen(self.world_size)
            self._listener.settimeout(ACCEPT_POLL_S)
            keep_working_folder()  # torchrun and its ranks import torch: not in a deleted folder
            self._agent = subprocess.Popen(
                torchrun_command(os.getpid(), self.world_size, self._dir / "torchrun"),
                env=rank_environment(self._devices, str(path)),
                stdin=subprocess.DEVNULL,
                close_fds=True,
            )
        except OSError:
            self.close()
            raise
        self._accepting = True
        threading.Thread(
            target=self._accept,
            args=(self._listener, self._agent),
            name="lorastudio-ranks-accept",
            daemon=True,
        ).start()
        return self._agent.pid

    def _accept(self, listener: socket.socket, agent: subprocess.Popen[bytes]) -> None:
        """Accept the ranks' connections on `listener` while the torchrun `agent` lives."""
        accepted = 0
        try:
            while accepted < self.world_size and not self._ending and agent.poll() is None:
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                conn.settimeout(None)
                with self._lock:
                    self._readers += 1
                threading.Thread(
                    target=self._serve, args=(conn, agent), name="lorastudio-rank", daemon=True
                ).start()
                accepted += 1
        except OSError as err:  # the listener was closed
            log.debug("rank channel listener ended: %s", err)
        finally:
            with self._lock:
                self._accepting = False

    # -- one rank's connection ----------------------------------------------------------------------
    def _serve(self, conn: socket.socket, agent: subprocess.Popen[bytes]) -> None:
        """Read one rank's connection `conn` to its end (the job's torchrun `agent`)."""
        rank: int | None = None
        try:
            rank, pid = read_hello(conn)
            job = RankJob(
                args=self._args,
                tag=(self.generation, self.pid or 0),
                device="cpu" if self._devices is None else None,
            )
            with self._lock:
                self._ranks[rank] = pid
            self._silence.heard(rank, pid)
            with self._send_lock:
                send_frame(conn, pickle.dumps(job))  # the first frame a rank reads
            with self._lock:
                self._sockets[rank] = conn  # from now on request_stop writes to it
                pending = self._stop_save if rank == 0 else None
            if pending is not None:
                with self._send_lock:
                    send_json(conn, {"kind": "stop", "save": pending})
            while (message := recv_json(conn)) is not None:
                self._silence.heard(rank)  # a "beat" (jobs/rank_silence.py) says only this
                self._receive(rank, message)
        except (OSError, ChannelError, KeyError, TypeError, ValueError) as err:
            log.warning("rank %s channel: %s", rank, err)
        finally:
            with contextlib.suppress(OSError):
                conn.close()
            if rank is not None and rank not in self._done:
                self._rank_lost(rank, agent)
            with self._lock:
                self._readers -= 1

    def _receive(self, rank: int, message: dict) -> None:
        kind = message["kind"]
        if kind == "event" and rank == 0:
            item = message["item"]
            if item[2].get("type") == "error" and (dead := self._dead_ranks(besides=0)):
                self._lost_first(min(dead))  # rank 0's broken collective is not the cause
                self._fail(self._died(min(dead)))
                return
            with self._lock:
                if self._failure is None:  # after a rank died, its Error is the job's end
                    self._events.put(tuple(item))  # type: ignore[arg-type]
        elif kind == "done":
            code, text = int(message["code"]), message.get("message")
            dead = self._dead_ranks(besides=rank) if code != 0 else []
            with self._lock:
                self._done[rank] = (code, text)
                if code != 0 and self._first is None:
                    # a rank already dead broke this rank's collective: its death is the cause
                    self._first = ("lost", min(dead)) if dead else ("failed", rank)
            if rank == 0 or code != 0:
                timer = threading.Timer(ABORT_GRACE_S, self._after_done, args=(rank,))
                timer.daemon = True
                timer.start()

    def _dead_ranks(self, besides: int) -> list[int]:
        """Ranks other than `besides` whose process ended, or is inside its exit, without
        reporting "done" (a rank killed -9 closes its sockets while exiting: the rank whose
        collective that broke may report first, RELIABILITY 396)."""
        with self._lock:
            ranks = {r: pid for r, pid in self._ranks.items() if r != besides and r not in self._done}
        return [r for r, pid in ranks.items() if process_ending(pid)]

    def _lost_first(self, rank: int) -> None:
        with self._lock:
            if self._first is None:
                self._first = ("lost", rank)

    def _died(self, rank: int) -> str:
        return (
            f"rank {rank} of {self.world_size} (pid {self._ranks.get(rank)}) died without finishing "
            "(killed or crashed); every process of the job was stopped"
        )

    def _after_done(self, rank: int) -> None:
        """ABORT_GRACE_S after rank `rank` was done: kill what is left when rank 0 is done (the
        run is over), or fail the job with a failed rank's error if rank 0 has not ended it."""
        if self._agent is None or self._agent.poll() is not None or self._ending:
            return
        if 0 in self._done:
            log.warning("ranks still running %.0f s after rank 0 ended; killing them", ABORT_GRACE_S)
            self.kill()
            return
        self._fail(self._first_report() or self._report(rank))

    def _rank_lost(self, rank: int, agent: subprocess.Popen[bytes]) -> None:
        """Rank `rank`'s connection ended without "done": the process (or the `agent`) died, or
        torchrun stopped it because a rank that reported a failure first had exited."""
        self._lost_first(rank)
        if self._ending:
            return
        agent_code = agent.poll()
        report = self._first_report()
        if agent_code is not None and agent_code != 0 and report is None:
            self._fail(
                f"the torchrun agent (pid {agent.pid}) died (exit code {agent_code}); "
                f"every rank of the job was stopped"
            )
        elif report is not None:
            self._fail(report)
        else:
            self._fail(self._died(self._first[1] if self._first is not None else rank))

    def _report(self, rank: int) -> str:
        """The failure rank `rank` reported ("done", non-zero)."""
        code, text = self._done[rank]
        return f"rank {rank} of {self.world_size} failed: {text or f'exit code {code}'}"

    def _first_report(self) -> str | None:
        """The failure report that was the first failure seen, or None (none was, or a rank's
        death came first)."""
        with self._lock:
            first = self._first
        return self._report(first[1]) if first is not None and first[0] == "failed" else None

    def _fail(self, message: str) -> None:
        """End the job: record why, kill every process, queue the Error event."""
        with self._lock:
            if self._failure is not None or self._ending:
                return
            self._failure = message
        log.error("data-parallel job: %s", message)
        self.kill()
        error = Error(message=message).model_dump(mode="json")
        self._events.put((self.generation, self.pid or 0, error))

    # -- the JobWorker interface --------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        """The torchrun agent's pid (the process this class started)."""
        return self._agent.pid if self._agent is not None else None

    @property
    def rank_pids(self) -> dict[int, int]:
        """rank -> pid of every rank that connected so far."""
        with self._lock:
            return dict(self._ranks)

    @property
    def exitcode(self) -> int | None:
        """None while the agent or any rank process runs (or a connection is still being read);
        then the agent's exit code (negative: killed by that signal)."""
        if self._agent is None:
            return None
        code = self._agent.poll()
        if code is None:
            return None
        alive = [pid for pid in self.rank_pids.values() if process_alive(pid)]
        for pid in alive:  # they die with the agent anyway; do not wait for the kernel to say so
            kill_quietly(pid)
        with self._lock:
            busy = self._readers > 0 or self._accepting
        return None if alive or busy else code

    def next_event(self, timeout: float) -> TaggedEvent | None:
        """The next event rank 0 sent (or this class's Error), or None after `timeout` s."""
        try:
            return self._events.get(timeout=timeout)
        except queue.Empty:
            return None

    def request_stop(self, save: bool) -> None:
        """Ask rank 0 to stop at its next check (every rank agrees on its answer)."""
        with self._lock:
            self._stop_save = save
            conn = self._sockets.get(0)
        if conn is None:
            return  # sent with the job when rank 0 connects
        with self._send_lock, contextlib.suppress(OSError):
            send_json(conn, {"kind": "stop", "save": save})

    def terminate(self) -> None:
        """SIGTERM to the agent: torchrun passes it to the ranks (and kills them 30 s later)."""
        self._ending = True
        if self._agent is not None and self._agent.poll() is None:
            self._agent.terminate()

    def kill(self) -> None:
        """SIGKILL to every rank and the agent."""
        self._ending = True
        for pid in self.rank_pids.values():
            kill_quietly(pid)
        if self._agent is not None and self._agent.poll() is None:
            self._agent.kill()

    def escalate(self, timeouts: Timeouts, stop_deadline: float | None, ended_at: float | None) -> None:
        escalate(self, timeouts, stop_deadline, ended_at)

    def join(self, timeout: float) -> bool:
        """Wait up to `timeout` s for the agent and every rank to be gone; True if they are."""
        deadline = time.monotonic() + timeout
        while self.exitcode is None:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def silence_note(self, silent_s: float) -> str | None:
        """The ranks silent for over `silent_s` s, with their pids, and those still answering."""
        return self._silence.note(silent_s)

    def failure_reason(self) -> str:
        """Why the job failed when it ended without a terminal event."""
        if self._failure is not None:
            return self._failure
        report = self._first_report()
        if report is not None:
            return report
        failed = {r: d for r, d in self._done.items() if d[0] != 0}
        if failed:
            return self._report(min(failed))
        return (
            f"the torchrun launch exited unexpectedly (code {self.exitcode}) before rank 0 reported "
            "the end of the run (see the server log)"
        )

    def close(self) -> None:
        """Close the channel and remove its folder (the processes must have exited)."""
        self._ending = True
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        with self._lock:
            sockets = list(self._sockets.values())
        for conn in sockets:
            with contextlib.suppress(OSError):
                conn.close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
