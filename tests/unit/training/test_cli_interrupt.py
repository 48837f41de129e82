"""Ctrl-C on `lorastudio train` in a real process: once stops, saves and exits 130 naming the
LoRA; twice aborts with 130 and says what the run left on disk (issue 30); a `--gpus 2` launch
Ctrl-C'd from its terminal stops, saves and exits 130 too (RELIABILITY 393, slow).

The Ctrl-C tests' process is forked from the test process (tests/forked_cli.py: its own pid,
handlers, a real SIGINT and its exit status): their Ctrl-C lands after the first step, long past
the imports (a fresh interpreter cost ~5 CPU s of them). The SIGTERM "while loading" keeps a fresh
interpreter: its signal lands in the seconds of the imports, which a forked child skips."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.process_tree import descendants

from forked_cli import start_cli
from lorastudio.jobs.store import RunStore
from lorastudio.settings import get_settings
from polling import until


def _start(tmp_path: Path, settings: dict) -> subprocess.Popen[str]:
    config = tmp_path / "run.json"
    config.write_text(json.dumps(settings))
    cmd = [sys.executable, "-m", "lorastudio.cli", "train", str(config), "--device", "cpu"]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ)
    )


def _wait_for_training(proc: subprocess.Popen[str], timeout: float = 120) -> str:
    """stderr up to the first step line (the Ctrl-C handler is installed by then)."""
    seen = []
    deadline = time.monotonic() + timeout
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if "] step " in line:
            return "".join(seen)
    proc.kill()
    raise AssertionError(f"no step line: {''.join(seen)}")


def _interruptible() -> None:
    """In the forked child: Ctrl-C is KeyboardInterrupt, as in a terminal's foreground command
    (a pytest run as a background job ignores SIGINT, and its children would inherit that)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _text(log: Path) -> str:
    """What the forked child wrote so far ("" before it opened its log)."""
    return log.read_text(encoding="utf-8") if log.is_file() else ""


@pytest.mark.parametrize("presses", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_ctrl_c_exits_130_and_says_what_was_saved(presses, tiny_model, small_dataset, tmp_path, run_settings):
    settings = run_settings("flux", tiny_model("flux"), small_dataset, {"steps": 5000, "output_name": "cc"})
    config, log = tmp_path / "run.json", tmp_path / "cli.log"
    config.write_text(json.dumps(settings), encoding="utf-8")
    proc = start_cli(log, "train", str(config), "--device", "cpu", prepare=_interruptible)
    try:  # the first step line: the Ctrl-C handler is installed by then
        until(lambda: "] step " in _text(log) or not proc.is_alive(), 120, "a step line")
        assert proc.is_alive() and proc.pid is not None, log.read_text(encoding="utf-8")
        os.kill(proc.pid, signal.SIGINT)
        if presses == 2:
            time.sleep(0.05)
            os.kill(proc.pid, signal.SIGINT)
        proc.join(120)
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()
    out = err = log.read_text(encoding="utf-8")  # stdout and stderr together
    assert proc.exitcode == 130, out
    assert "Traceback" not in err, err
    lora = get_settings().outputs_dir / "cc" / "cc.safetensors"
    runs = RunStore.open(get_settings().db_path, recover=False).list_runs()
    assert [(r["output_name"], r["source"]) for r in runs] == [("cc", "cli")]  # listed under Runs
    if presses == 1:
        assert "stopped early, saved" in out and str(lora) in out and lora.is_file()
        assert runs[0]["status"] == "stopped" and runs[0]["steps_run"] >= 1
    else:
        assert "aborted" in err
        assert runs[0]["status"] in ("interrupted", "stopped")  # the 2nd press may come after the save
        assert (str(lora) in out) == lora.is_file()
        assert lora.is_file() or "nothing saved" in out or "checkpoint" in out


def _wait_for_line(proc: subprocess.Popen[str], text: str, timeout: float = 120) -> str:
    seen = []
    deadline = time.monotonic() + timeout
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return "".join(seen)
    proc.kill()
    raise AssertionError(f"no {text!r} line: {''.join(seen)}")


def test_sigterm_while_loading_leaves_no_output_folder(tiny_model, small_dataset, tmp_path, run_settings):
    """`kill <pid>` of a CLI run before its first step: the run stops (as on Ctrl-C) and its fresh
    output folder goes with it, the record says stopped (was: Python ended at once, the empty
    folder refused the name to every new run, the record stayed live)."""
    settings = run_settings(
        "flux", tiny_model("flux"), small_dataset, {"steps": 5000, "output_name": "termed"}
    )
    proc = _start(tmp_path, settings)
    _wait_for_line(proc, "loading")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err and "nothing saved" in out, out + err
    assert not (get_settings().outputs_dir / "termed").exists()
    [run] = RunStore.open(get_settings().db_path, recover=False).list_runs()
    assert (run["output_name"], run["status"]) == ("termed", "stopped")


@pytest.mark.slow
def test_ctrl_c_then_resume_is_bitwise_the_uninterrupted_edit_run(
    tiny_model, small_pairs, tmp_path, run_settings
):
    """Session 25 resume audit: `lorastudio train` of FLUX.1 Kontext (controls, masks, EMA, the
    disk latent cache) stopped by Ctrl-C and continued by `lorastudio train --resume` gives the
    losses per step, the LoRA and the raw EMA file of the uninterrupted CLI run, bitwise."""
    import shutil

    import torch
    from PIL import Image
    from safetensors.torch import load_file

    data = tmp_path / "pairs"
    shutil.copytree(small_pairs, data)
    (data / "masks").mkdir()
    for image in sorted(data.glob("*.png")):
        w, h = Image.open(image).size
        mask = Image.new("L", (w, h), 0)
        mask.paste(255, (0, 0, w // 2, h))
        mask.save(data / "masks" / image.name)
    over = {
        "steps": 40,
        "batch_size": 1,
        "ema_decay": 0.9,
        "latent_cache": "disk",
        "save_every": 1,
        "keep_last": 2,
    }
    model = tiny_model("flux-kontext")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    full = _start(tmp_path / "a", run_settings("flux-kontext", model, data, {**over, "output_name": "full"}))
    out, err = full.communicate(timeout=300)
    assert full.returncode == 0, out + err
    proc = _start(tmp_path / "b", run_settings("flux-kontext", model, data, {**over, "output_name": "cc"}))
    _wait_for_training(proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "stopped early, saved" in out, out + err
    run_dir = get_settings().outputs_dir / "cc"
    cmd = [sys.executable, "-m", "lorastudio.cli", "train", "--resume", str(run_dir), "--device", "cpu"]
    resumed = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert resumed.returncode == 0 and "resumed from step" in resumed.stdout, resumed.stdout + resumed.stderr
    store = RunStore.open(get_settings().db_path, recover=False)
    runs = {(r["output_name"], r["status"]): r["id"] for r in store.list_runs()}

    def losses(run_id: str) -> list[float]:
        return [float(m["loss"]) for m in store.get_run(run_id)["metrics"] if "loss" in m]

    assert losses(runs[("cc", "completed")]) == losses(runs[("full", "completed")])
    assert len(losses(runs[("full", "completed")])) == 40
    outputs = get_settings().outputs_dir
    for name in ("{}.safetensors", "{}.raw.safetensors"):
        a, b = (
            load_file(str(outputs / "full" / name.format("full"))),
            load_file(str(run_dir / name.format("cc"))),
        )
        assert a.keys() == b.keys() and a and all(torch.equal(a[k], b[k]) for k in a), name


@pytest.mark.slow
def test_a_cli_run_killed_at_a_checkpoint_write_resumes_bitwise(
    tiny_model, small_dataset, tmp_path, run_settings
):
    """Session 25 resume audit: `lorastudio train` kill -9'd once a checkpoint is complete and the
    next one is staging (or, on a slow host, just after it), then `train --resume`: the leftover
    staging folder goes and the LoRA and raw EMA file are the uninterrupted run's, bitwise."""
    import torch
    from safetensors.torch import load_file
    from tests.polling import until

    from lorastudio.training.resume.checkpoint import CHECKPOINTS

    over = {"steps": 60, "batch_size": 1, "ema_decay": 0.9, "latent_cache": "disk", "save_every": 1}
    over |= {"keep_last": 2, "random_crop": True, "cache_variants": 2}
    model = tiny_model("flux")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    full = _start(tmp_path / "a", run_settings("flux", model, small_dataset, {**over, "output_name": "full"}))
    out, err = full.communicate(timeout=300)
    assert full.returncode == 0, out + err
    proc = _start(tmp_path / "b", run_settings("flux", model, small_dataset, {**over, "output_name": "k"}))
    checkpoints = get_settings().outputs_dir / "k" / CHECKPOINTS

    def at_a_write() -> bool:
        names = [e.name for e in os.scandir(checkpoints)] if checkpoints.is_dir() else []
        done = [n for n in names if n.startswith("step-")]
        return bool(done) and (any(n.startswith(".staging-") for n in names) or len(done) > 1)

    until(at_a_write, 120, "a checkpoint write")
    proc.kill()
    proc.communicate(timeout=60)
    cmd = [
        sys.executable,
        "-m",
        "lorastudio.cli",
        "train",
        "--resume",
        str(checkpoints.parent),
        "--device",
        "cpu",
    ]
    resumed = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert resumed.returncode == 0 and "done: 60 step(s)" in resumed.stdout, resumed.stdout + resumed.stderr
    assert not [p for p in checkpoints.iterdir() if p.name.startswith(".staging-")]
    for name in ("{}.safetensors", "{}.raw.safetensors"):
        a = load_file(str(get_settings().outputs_dir / "full" / name.format("full")))
        b = load_file(str(checkpoints.parent / name.format("k")))
        assert a.keys() == b.keys() and a and all(torch.equal(a[k], b[k]) for k in a), name


def _gpus_launch(settings: dict, tmp_path: Path) -> subprocess.Popen[str]:
    """`lorastudio train --gpus 2 --device cpu` of `settings` in a session of its own (a
    terminal's Ctrl-C is then os.killpg of its pid), returned once it trains."""
    config = tmp_path / "run.json"
    config.write_text(json.dumps(settings))
    cmd = [sys.executable, "-m", "lorastudio.cli", "train", str(config), "--gpus", "2", "--device", "cpu"]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
        start_new_session=True,
    )
    _wait_for_training(proc)
    return proc


@pytest.mark.slow  # a torchrun launch of two gloo ranks (~20 s on a busy host)
def test_ctrl_c_of_a_gpus_launch_stops_saves_and_exits_130(tiny_model, small_dataset, tmp_path, run_settings):
    """A terminal's Ctrl-C goes to the command's process group: the command ignores it, torchrun's
    agent passes it to the ranks (each in a session of its own) and they stop and save as rank 0
    decides. Before (RELIABILITY 393) the run was saved and recorded stopped, but the command
    exited 1 with torchrun's "SignalException: Process N got signal: 2" traceback."""
    proc = _gpus_launch(
        run_settings("flux", tiny_model("flux"), small_dataset, {"steps": 5000, "output_name": "cc"}),
        tmp_path,
    )
    launched = descendants(proc.pid)  # the agent and both ranks
    assert len(launched) >= 3, launched
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err and "SignalException" not in err, err
    assert err.count("stopping after this step and saving") == 1, err  # rank 0's word only (395)
    lora = get_settings().outputs_dir / "cc" / "cc.safetensors"
    assert "stopped early, saved" in out and str(lora) in out and lora.is_file(), out
    [run] = RunStore.open(get_settings().db_path, recover=False).list_runs()
    assert (run["output_name"], run["status"]) == ("cc", "stopped") and run["steps_run"] >= 1
    until(
        lambda: not any(Path(f"/proc/{pid}").exists() for pid in launched), 30, "every launched process gone"
    )


def _rank_pid(launch: int, rank: int) -> int:
    for pid in descendants(launch):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ and b"LORASTUDIO_AGENT_PID" in b"".join(environ):
            return pid
    raise AssertionError(f"no rank {rank} under {launch}")


@pytest.mark.slow  # a torchrun launch, then torchrun's 30 s for the ranks to end
def test_a_hung_rank_of_a_gpus_launch_is_named_after_ctrl_c(
    tiny_model, small_dataset, tmp_path, run_settings
):
    """Rank 1 hangs (SIGSTOP) mid-run; Ctrl-C: rank 0 waits in its collective for rank 1, so
    neither ends, and torchrun kills both 30 s later. The command then names the ranks that never
    ended, on the terminal and in the record (RELIABILITY 394; before: exit 130, the record
    "interrupted" by the next reader, no rank named)."""
    proc = _gpus_launch(
        run_settings("flux", tiny_model("flux"), small_dataset, {"steps": 50000, "output_name": "hung"}),
        tmp_path,
    )
    launched = descendants(proc.pid)
    rank_1 = _rank_pid(proc.pid, 1)
    os.kill(rank_1, signal.SIGSTOP)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, out + err
    said = " ".join(err.split())
    assert f"rank 1 (pid {rank_1})" in said and "did not end within 30 s of the stop" in said, err
    [run] = RunStore.open(get_settings().db_path, recover=False).list_runs()
    assert run["status"] == "interrupted" and f"rank 1 (pid {rank_1})" in run["error"], run
    until(
        lambda: not any(Path(f"/proc/{pid}").exists() for pid in launched), 30, "every launched process gone"
    )
