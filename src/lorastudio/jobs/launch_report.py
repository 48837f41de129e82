"""Why a `lorastudio train --gpus N` launch failed: which rank, and how (RELIABILITY 391).

The job service learns it from its ranks' channels (jobs/launcher.py); a CLI launch had only
torchrun's exit code, and its run record held whatever rank 0 had recorded last: after a kill -9
of rank 1, rank 0's own broken collective ("RuntimeError: [...gloo...] Connection reset by
peer"), or nothing (rank 0 stopped by torchrun's SIGTERM: "interrupted"). Now the launching
command gives the launch a folder (LAUNCH_DIR_ENV, its torchrun log folder) where

- the agent (jobs/agent.py) writes FAILURES_FILE: how each failed rank ended, from torchrun's
  ChildFailedError (rank -> pid, exit code; a negative code is the signal that killed it);
- a rank whose run fails writes rank{R}.error: its one-line error;

and after the launch it names the cause (`launch_failure`), prints it and writes it in the
run's record (`record_launch_failure`; rank 0 records under the id the command chose,
RUN_ID_ENV). The cause, as the job service decides it: a rank that died outright (a signal
other than the SIGTERM torchrun stops the others with, or a non-zero exit without an error of
its own) broke the others' collectives, so their errors are not the cause; else the earliest
error a rank wrote (on the host's clock, host_clock.py: a time sync between two ranks' errors
leaves their order); else torchrun's first failure.

Every rank also notes when it starts and when its command ends (`note_rank_state`): after a
Ctrl-C, torchrun kills the ranks that did not end within 30 s, and `launch_hung` names them (a
rank that hangs, and those waiting for it in a collective: RELIABILITY 394). No torch here.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

from lorastudio import json_read
from lorastudio.host_clock import host_now
from lorastudio.staged_files import staging_path

LAUNCH_DIR_ENV = "LORASTUDIO_LAUNCH_DIR"  # the launch's report folder (the CLI's torchrun log folder)
RUN_ID_ENV = "LORASTUDIO_CLI_RUN_ID"  # the run record's id, chosen by the launching command
FAILURES_FILE = "failures.json"
STOPPED_BY_TORCHRUN = {-signal.SIGTERM, -signal.SIGINT}  # how torchrun ends the other ranks


def note_rank_failure(rank: int, message: str) -> None:
    """In a rank of a CLI launch (LAUNCH_DIR_ENV set): keep this rank's one-line error for the
    launching command, with when it happened. Never raises (the rank is failing already)."""
    folder = os.environ.get(LAUNCH_DIR_ENV)
    if not folder:
        return
    record = {"message": message, "at": host_now()}  # ranks of one host: one clock, never set
    _write_json(Path(folder) / f"rank{rank}.error", record)


def note_rank_state(rank: int, state: str) -> None:
    """In a rank of a CLI launch: note this rank's pid at `state` ("started", "ended")."""
    folder = os.environ.get(LAUNCH_DIR_ENV)
    if folder:
        _write_json(Path(folder) / f"rank{rank}.{state}", {"pid": os.getpid(), "at": host_now()})


def launch_hung(folder: Path, world: int) -> str | None:
    """After a launch ended by a signal: the ranks that started but never ended their command
    (torchrun killed them when they did not end within 30 s of the signal), or None."""
    hung = [
        (r, pid)
        for r in range(world)
        if isinstance(pid := _read_json(folder / f"rank{r}.started").get("pid"), int)
        and not (folder / f"rank{r}.ended").exists()
    ]
    if not hung:
        return None
    names = ", ".join(f"rank {r} (pid {pid})" for r, pid in hung)
    return (
        f"{names} of {world} did not end within 30 s of the stop and torchrun killed "
        f"{'it' if len(hung) == 1 else 'them'} (a rank that hangs holds the others in their next collective)"
    )


def write_failures(failures: dict[int, tuple[int, int]]) -> None:
    """In the agent of a CLI launch: keep how each failed rank ended, rank -> (pid, exit code)."""
    folder = os.environ.get(LAUNCH_DIR_ENV)
    if folder:
        data = {str(rank): {"pid": pid, "exitcode": code} for rank, (pid, code) in failures.items()}
        _write_json(Path(folder) / FAILURES_FILE, data)


def launch_failure(folder: Path, world: int) -> str | None:
    """The cause of a failed launch of `world` ranks from what its agent and ranks wrote in
    `folder` (see the module docstring); None when nothing was written (the agent itself failed
    before its ranks, or was killed)."""
    failures = {int(r): v for r, v in _read_json(folder / FAILURES_FILE).items()}
    errors = {
        r: e
        for r in range(world)
        if isinstance(e := _read_json(folder / f"rank{r}.error").get("message"), str)
    }
    times = {r: float(_read_json(folder / f"rank{r}.error").get("at", 0.0)) for r in errors}
    died = [
        r
        for r, failure in sorted(failures.items())
        if failure["exitcode"] not in STOPPED_BY_TORCHRUN and (failure["exitcode"] < 0 or r not in errors)
    ]
    if died:
        rank = died[0]
        return f"rank {rank} of {world} (pid {failures[rank]['pid']}) died without finishing ({_how(failures[rank]['exitcode'])}); every process of the launch was stopped"
    if errors:
        rank = min(errors, key=lambda r: (times[r], r))
        return f"rank {rank} of {world} failed: {errors[rank]}"
    if failures:
        rank = min(failures)
        return (
            f"rank {rank} of {world} (pid {failures[rank]['pid']}) ended ({_how(failures[rank]['exitcode'])})"
        )
    return None


def record_launch_failure(
    run_id: str, message: str, status: str = "failed", *, note_stopped: bool = False
) -> None:
    """Write `message` as the error of the launch's run record `run_id` with `status` (failed,
    or interrupted for a launch that was stopped), unless the record ended otherwise (completed,
    stopped) or does not exist (rank 0 never recorded it). `note_stopped`: a stopped record
    takes `message` as its note (a hang stop the run answered: cli/launch_hang.py)."""
    from lorastudio.errors import NotFound
    from lorastudio.jobs.persist import STORE_ERRORS
    from lorastudio.jobs.records import JobStatus, now_iso
    from lorastudio.jobs.store import RunStore
    from lorastudio.settings import get_settings

    settings = get_settings()
    if not settings.db_path.is_file():
        return
    try:
        store = RunStore.open(settings.db_path, recover=False)
    except STORE_ERRORS:
        return
    try:
        with contextlib.suppress(*STORE_ERRORS):
            try:
                run = store.get_run(run_id, max_points=0)
            except NotFound:
                return
            if run["status"] == JobStatus.STOPPED and note_stopped:
                store.update_run(run_id, error=message)
                return
            if run["status"] in (JobStatus.COMPLETED, JobStatus.STOPPED):
                return
            finished = run.get("finished_at") or now_iso()
            store.update_run(run_id, status=JobStatus(status), error=message, finished_at=finished)
    finally:
        store.close()


def _how(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


def _write_json(path: Path, data: Any) -> None:
    """Write `data` to `path` whole (a temp file renamed over it); errors are ignored."""
    temp = staging_path(path)
    with contextlib.suppress(OSError):
        temp.write_text(json.dumps(data))
        os.replace(temp, path)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json_read.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
