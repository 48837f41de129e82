"""The torchrun launch of `lorastudio train --gpus N` (cli/train_launch.py) run under the job
service's hang watch (jobs/launch_watch.py: jobs/step_watch.py's allowance, jobs/rank_silence.py's
beats), stopped as the service stops a hung job (jobs/pump.py `_stop_hung`):

- once rank 0 reported a step, a step loop silent past the allowance (at least HANG_MIN_S x
  LORASTUDIO_WORKER_TIMEOUT_SCALE, HANG_STEP_FACTOR x the slowest step; never during loading,
  the caches, the first step, an announced sample or validation round, a checkpoint or the final
  save) is hung: rank 0 is asked for a stop-and-save (a run that was only slow saves its LoRA and
  ends "stopped" with the reason), then, past the stop path's deadline (jobs/busy.stop_deadline:
  stop_grace_s, or busy_grace_s while announced work runs), the agent is terminated (torchrun
  passes SIGTERM to the ranks), and kill_grace_s later every rank and the agent are killed;
- the reason names how long the loop was silent after which step and which ranks went silent,
  the one silent longest first, with their pids; the run ends "failed" with it (the service's
  words: "it did not answer the stop and was terminated; no LoRA was saved"), its checkpoints
  kept; a fresh run's folder without one is removed after (cli/train_cmd.py, as after a failed
  launch).

`launch_timeouts` is the service's Timeouts of a job (tests replace it, as the service's tests
pass theirs). No torch here.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from lorastudio.jobs.busy import stop_deadline
from lorastudio.jobs.launch_watch import LaunchWatch
from lorastudio.jobs.process import Timeouts, escalate
from lorastudio.jobs.records import JobStatus
from lorastudio.jobs.step_watch import HANG_MIN_S
from lorastudio.jobs.torchrun_launch import kill_quietly
from lorastudio.processes import process_alive

POLL_S = 0.1
GONE_S = 10.0  # after the kill, how long the killed ranks may take to be gone


def launch_timeouts() -> Timeouts:
    """The job service's timeouts of a job (jobs/service.py): its hang allowance scaled by
    worker_timeout_scale (LORASTUDIO_WORKER_TIMEOUT_SCALE)."""
    from lorastudio.settings import get_settings

    return Timeouts(hang_min_s=HANG_MIN_S * get_settings().worker_timeout_scale)


@dataclass(frozen=True)
class Hung:
    """A launch the watch stopped: the run's status ("stopped": it answered and saved; "failed")
    and its error, the command's one-line message."""

    status: str
    message: str


class _Launch:
    """The running launch as jobs/process.escalate sees a worker: terminate (SIGTERM to the agent,
    which passes it to the ranks), kill (SIGKILL to every rank and the agent)."""

    def __init__(self, agent: subprocess.Popen[bytes], watch: LaunchWatch):
        self.agent, self.watch = agent, watch
        self.killed: list[int] = []
        self.reason: str | None = None  # why the watch stopped it (None: it did not)

    def terminate(self) -> None:
        if self.agent.poll() is None:
            self.agent.terminate()

    def kill(self) -> None:
        self.killed = list(self.watch.rank_pids.values())
        for pid in self.killed:
            kill_quietly(pid)
        if self.agent.poll() is None:
            self.agent.kill()


def run_watched(
    command: list[str], env: dict[str, str], folder: Path, world: int, console: Console
) -> tuple[int, Hung | None]:
    """Run the launch `command` (the agent, torchrun's arguments, the ranks' `train` arguments)
    with its watch listening in the launch's `folder`; returns (the agent's exit code, Hung when
    the watch stopped it, else None)."""
    timeouts = launch_timeouts()
    watch = LaunchWatch(folder, world, timeouts)
    try:
        watch.start()
    except OSError as err:  # (a socket path too long): the launch runs, unwatched as before
        console.print(
            f"warning: this launch has no hang watch: {err}", style="yellow", markup=False, highlight=False
        )
    try:
        agent = subprocess.Popen(command, env=env)
        launch = _Launch(agent, watch)
        try:
            code = _watch(launch, watch, timeouts, console)
        except BaseException:  # a SIGTERM of this command (Terminated): the launch ends with it
            launch.kill()
            agent.wait()
            raise
        for pid in launch.killed:  # a rank stopped (SIGSTOP) dies of the kill: no process stays
            _wait_gone(pid)
    finally:
        watch.close()
    if launch.reason is None:
        return code, None
    reason = launch.reason
    if code == 0 and watch.run.status == JobStatus.COMPLETED:  # only slow: it saved ("stopped")
        return code, Hung("stopped", reason)
    note = f"{reason}; it did not answer the stop and was terminated; no LoRA was saved"
    return code, Hung("failed", note)


def _watch(launch: _Launch, watch: LaunchWatch, timeouts: Timeouts, console: Console) -> int:
    """Wait for the launch to end, stopping it as hung when the watch says so (`launch.reason`);
    returns the agent's exit code."""
    stop_at = None
    while (code := _wait(launch.agent, POLL_S)) is None:
        now = time.monotonic()
        if launch.reason is None and (reason := watch.hung(now)) is not None:
            launch.reason, stop_at = reason, now
            console.print(
                "the run stopped reporting steps: asking its ranks to stop and save (ended if they do not)",
                style="yellow",
                highlight=False,
            )
            watch.request_stop()
        if stop_at is not None:
            deadline = stop_deadline(stop_at, watch.run.busy, watch.run.busy_changed_at, timeouts)
            escalate(launch, timeouts, deadline, None)
    return code


def _wait(agent: subprocess.Popen[bytes], timeout: float) -> int | None:
    try:
        return agent.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + GONE_S
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
