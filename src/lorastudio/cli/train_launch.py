"""A data-parallel `lorastudio train --gpus N` (cli/train_cmd.py): the checks before a launch,
the arguments every rank runs with, and the launch itself, through torchrun under
jobs/agent.py (bound to this process's lifetime, as the job service launches its ranks).

- `check_launch`: refuse (ConfigError, every problem at once) a launch this host or config
  cannot run, before anything is recorded or started.
- `launch_arguments`: the `train` command line of every rank (paths made absolute).
- `launch`: run torchrun with N ranks; returns its exit code. Ctrl-C reaches the ranks through
  torchrun, not this process. A failed launch names the rank that failed and how, on the terminal
  and in the run's record (jobs/launch_report.py). A step loop silent past the job service's
  allowance is stopped as the service stops a hung job, naming the rank that went silent first
  (cli/launch_hang.py); the command then exits 1.
- `bind_to_agent`: in a rank, die with the launching agent (never left waiting on a dead launch).
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from lorastudio.cli.launch_hang import run_watched
from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.hub_token import rank_environment


def bind_to_agent() -> None:
    """Under a launch by this command (jobs/agent.py sets LORASTUDIO_AGENT_PID), die with the
    agent like the job service's ranks do: a rank is never left waiting on a dead launch."""
    from lorastudio.digits import whole_number
    from lorastudio.jobs.channel import AGENT_PID_ENV
    from lorastudio.jobs.worker import bind_to_parent

    agent = whole_number(os.environ.get(AGENT_PID_ENV, ""))  # "²": int() raised (RELIABILITY 2103)
    if agent is not None:
        bind_to_parent(agent)


def check_launch(cfg: Any, device: str | None) -> None:
    """Refuse a data-parallel launch this host or config cannot run. Raises ConfigError."""
    from lorastudio.cli.train_check import gpu_count_problems
    from lorastudio.training.parallel_rules import data_parallel_problems

    problems = data_parallel_problems(cfg.num_gpus, cfg.batch_size, cfg.lora_dropout)
    if device is not None and device != "cpu" and device != "cuda":
        problems.append(
            FieldProblem(
                "--device",
                f"{device}: with --gpus each process takes one GPU (cuda:LOCAL_RANK of "
                "CUDA_VISIBLE_DEVICES); use --device cuda or cpu",
            )
        )
    problems += gpu_count_problems(cfg.num_gpus, device)
    if problems:
        raise ConfigError(problems)


def launch_arguments(
    config: Path | None, overrides: list[str], device: str | None, resume: Path | None
) -> list[str]:
    """The `train` arguments every rank runs with (paths made absolute)."""
    args = ["-m", "lorastudio.cli", "train"]
    if config is not None:
        args.append(str(config.resolve()))
    for item in overrides:
        args += ["--set", item]
    if device is not None:
        args += ["--device", device]
    if resume is not None:
        args += ["--resume", str(resume.resolve())]
    return args


def launch(
    world: int,
    config: Path | None,
    overrides: list[str],
    device: str | None,
    resume: Path | None,
    console: Console,
) -> int:
    """Run this command under torchrun with `world` processes; returns torchrun's exit code.
    Prints the plain torchrun command that does the same (e.g. to run it by hand). A failed
    launch: prints which rank failed and how, and writes it in the run's record (rank 0 records
    the run under the id chosen here; jobs/launch_report.py)."""
    from lorastudio.jobs.cli_record import new_run_id
    from lorastudio.jobs.launch_report import (
        LAUNCH_DIR_ENV,
        RUN_ID_ENV,
        launch_failure,
        launch_hung,
        record_launch_failure,
    )

    rank_args = launch_arguments(config, overrides, device, resume)
    torchrun = ["--standalone", "--nnodes=1", f"--nproc-per-node={world}", "--max-restarts=0"]
    shown = ["torchrun", *torchrun, *rank_args]
    console.print(f"launching {world} processes: {shlex.join(shown)}", markup=False, highlight=False)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # torchrun passes Ctrl-C to the ranks
    try:
        with tempfile.TemporaryDirectory(prefix="lorastudio-torchrun-") as logs:
            agent = [sys.executable, "-m", "lorastudio.jobs.agent", str(os.getpid())]
            run_id = new_run_id()
            # the hub token this command held (and took out of its os.environ): each rank holds it
            env = {**os.environ, **rank_environment(), LAUNCH_DIR_ENV: logs, RUN_ID_ENV: run_id}
            command = [*agent, *torchrun, f"--log-dir={logs}", *rank_args]
            code, hung = run_watched(command, env, Path(logs), world, console)
            cause = launch_failure(Path(logs), world) if code != 0 and hung is None else None
            if hung is not None:  # the watch stopped it (the ranks' own errors follow from that)
                message = f"error: {hung.message}"  # one line, not wrapped
                console.print(message, style="red", markup=False, highlight=False, soft_wrap=True)
                record_launch_failure(run_id, hung.message, status=hung.status, note_stopped=True)
                return 1
            if cause is not None:
                console.print(f"error: {cause}", style="red", markup=False, highlight=False)
                record_launch_failure(run_id, cause)
            elif code > 128 and (hung := launch_hung(Path(logs), world)) is not None:  # a signal
                console.print(f"error: {hung}", style="red", markup=False, highlight=False)
                record_launch_failure(run_id, hung, status="interrupted")
            return code
    finally:
        signal.signal(signal.SIGINT, previous)
