"""A rank of `lorastudio train --gpus 2 --device cpu` (two gloo ranks under torchrun) hangs
(SIGSTOP) in its step loop: the command's hang watch (cli/launch_hang.py, the job service's
step watch and rank beats) names the rank that went silent first and for how long, ends every
rank (stop-and-save asked, then terminate, then kill), records the run failed with that reason,
keeps its checkpoint, and exits 1 with a one-line error. Was: the launch waited for ever, until a
Ctrl-C (RELIABILITY 394, 985). The command runs in this process (tests/cli_runner.py) so that the
allowance is the test's, as the job service's tests pass theirs (Timeouts)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from tests.process_tree import descendants

from cli_runner import run_cli_streams
from lorastudio.cli import launch_hang
from lorastudio.jobs.process import Timeouts
from lorastudio.jobs.store import RunStore
from lorastudio.processes import process_alive
from lorastudio.settings import get_settings
from lorastudio.training.resume.checkpoint import list_checkpoints
from polling import until

pytestmark = pytest.mark.slow  # a torchrun launch of two gloo ranks (~20 s on a busy host)

WATCH = Timeouts(hang_min_s=3.0, hang_step_factor=5.0, stop_grace_s=0.5, kill_grace_s=0.5)


def _rank_pid(rank: int) -> int | None:
    """The pid of this test's launched rank `rank`, once torchrun started it."""
    for pid in descendants(os.getpid()):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ and any(
            e.startswith(b"LORASTUDIO_AGENT_PID=") for e in environ
        ):
            return pid
    return None


def _steps_run() -> int:
    db = get_settings().db_path
    if not db.is_file():
        return 0
    store = RunStore.open(db, recover=False)
    try:
        return max((run["steps_run"] or 0 for run in store.list_runs()), default=0)
    finally:
        store.close()


def test_a_hung_rank_is_named_every_rank_ended_and_the_run_failed_with_its_checkpoint(
    tiny_model, small_dataset, tmp_path, run_settings, capsys, monkeypatch
):
    monkeypatch.setattr(launch_hang, "launch_timeouts", lambda: WATCH)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    settings = {"steps": 50000, "output_name": "hang", "save_every": 2, "keep_last": 1}
    config = tmp_path / "run.json"
    config.write_text(json.dumps(run_settings("flux", tiny_model("flux"), small_dataset, settings)))
    stopped: dict[str, object] = {}

    def hang_rank_1() -> None:  # beside the command, which runs in the main thread
        try:
            until(lambda: _steps_run() >= 3, 240, "step 3 recorded")
            pids = {r: until(lambda r=r: _rank_pid(r), 30, f"rank {r}") for r in (0, 1)}
            stopped["launched"] = descendants(os.getpid())
            os.kill(pids[1], signal.SIGSTOP)
            stopped["pids"] = pids
        except AssertionError as err:
            stopped["error"] = str(err)

    thread = threading.Thread(target=hang_rank_1, daemon=True)
    thread.start()
    code, out, err = run_cli_streams(
        capsys, monkeypatch, "train", str(config), "--gpus", "2", "--device", "cpu"
    )
    thread.join(10)
    assert "error" not in stopped and "pids" in stopped, (stopped, out, err)
    pids = stopped["pids"]
    assert isinstance(pids, dict)
    assert code == 1, out + err
    [line] = [ln for ln in err.splitlines() if ln.startswith("error: ")]  # one line
    assert "the worker sent nothing for" in line and "it was stopped as hung" in line, line
    # rank 1 went silent first (rank 0 waits for it in the next collective), named with its pid
    assert f"is silent: rank 1 (pid {pids[1]}, last heard" in line or (
        f"silent: rank 1 (pid {pids[1]}, last heard" in line
    ), line
    assert line.index("rank 1 (pid") < line.index("rank 0 (pid"), line
    assert "it did not answer the stop and was terminated" in line, line
    assert "Traceback" not in err, err
    until(
        lambda: not any(process_alive(p) for p in stopped["launched"]),  # type: ignore[attr-defined]
        30,
        "every launched process gone",
    )
    [run] = RunStore.open(get_settings().db_path, recover=False).list_runs()
    assert run["status"] == "failed" and run["error"] == line.removeprefix("error: "), run
    run_dir = get_settings().outputs_dir / "hang"
    assert list_checkpoints(run_dir), sorted(run_dir.rglob("*"))  # kept: the run can be resumed


def test_a_hung_one_process_run_ends_itself_failed_leaving_no_fresh_folder(
    tiny_model, small_dataset, tmp_path, run_settings
):
    """A one-process run whose step loop hangs after step 3 (tests/cli_hang_driver.py: its event
    sink blocks for ever): the watch in its own process (cli/self_watch.py) asks for the stop,
    then records the run failed, removes the fresh run's folder (no checkpoint yet: the service's
    rule), prints the one-line error and exits 1 (RELIABILITY 986)."""
    settings = {"steps": 50000, "output_name": "alone"}
    config = tmp_path / "run.json"
    config.write_text(json.dumps(run_settings("flux", tiny_model("flux"), small_dataset, settings)))
    driver = Path(__file__).parents[2] / "cli_hang_driver.py"
    cmd = [sys.executable, str(driver), "3", "train", str(config), "--device", "cpu"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]  # one line
    assert line.startswith("error: the worker sent nothing for") and "after step 3" in line, line
    assert line.endswith("it did not answer the stop and was terminated; no LoRA was saved"), line
    assert "asking it to stop and save" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    [run] = RunStore.open(get_settings().db_path, recover=False).list_runs()
    assert run["status"] == "failed" and run["error"] == line.removeprefix("error: "), run
    assert not (get_settings().outputs_dir / "alone").exists()
