"""Data-parallel jobs launched by the job service through torchrun (jobs/launcher.py), tested
on the CPU: with settings.cpu_data_parallel the ranks are gloo processes, launched exactly as
GPU ranks are (torchrun agent bound to the server, one rank_worker per rank, events and stop
requests over the unix-socket channel).

Always on, but run by tests/reliability/test_rank_death.py as the next job after a rank's death
(tests/dp_jobs.py; one torchrun launch fewer): a 2-rank job stops and saves on request, with one
set of events and files, and its checkpoint resumes in one process to the LoRA of an
uninterrupted one-process run. Slow: a 2-rank job that completes and resumes on 2 ranks, and
`lorastudio train --gpus 2`.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from dp_jobs import (
    FINAL,
    assert_one_set_of_events,
    assert_same_lora,
    dp_config,
    job_events,
    single_process_lora,
    wait_job,
)
from lorastudio.cli.app import _register, app
from lorastudio.cli.run_display import plan_line
from lorastudio.cli.train_launch import launch_arguments
from lorastudio.config import TrainConfig
from lorastudio.errors import ConfigError
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.service import JobService
from lorastudio.jobs.store import RunStore
from lorastudio.jobs.torchrun_launch import torchrun_command, visible_devices
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings
from lorastudio.training.events import PlanChosen, PlanTrial
from lorastudio.training.loop import train


@pytest.fixture
def dp_settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"cpu_data_parallel": True})


@pytest.fixture
def model(tiny_model: Callable[[str], Path], shapes: Path) -> Path:
    return tiny_model("flux")


def _service(settings: Settings) -> JobService:
    return JobService(settings, RunStore.open(settings.db_path), GpuArbiter()).start()


# -- validation, arbiter, launch command (cheap) ------------------------------------------------------
def test_num_gpus_needs_that_many_gpus_unless_the_ranks_run_on_the_cpu(
    settings: Settings, dp_settings: Settings, model: Path
) -> None:
    with pytest.raises(ConfigError) as refused:
        validate_run(dp_config(model, num_gpus=2), settings, live_output_names=set())
    message = {p.field: p.message for p in refused.value.problems}["num_gpus"]
    assert "needs 2 CUDA GPUs" in message and "this host has 0" in message

    run = validate_run(dp_config(model, num_gpus=2), dp_settings, live_output_names=set())
    assert run.worker_config.num_gpus == 2

    with pytest.raises(ConfigError) as inexact:
        validate_run(
            dp_config(model, num_gpus=2, batch_size=3, lora_dropout=0.1), dp_settings, live_output_names=set()
        )
    fields = {p.field: p.message for p in inexact.value.problems}
    assert "does not divide by the 2 processes" in fields["batch_size"]
    assert "same dropout masks" in fields["lora_dropout"]


def test_the_arbiter_reserves_one_device_per_rank_and_the_ranks_see_only_those() -> None:
    arbiter = GpuArbiter()
    assert arbiter.begin_training("a", devices=2) == (0, 1)
    assert arbiter.reserved_devices == (0, 1) and arbiter.training_job == "a"
    arbiter.end_training("a")
    assert arbiter.reserved_devices == () and arbiter.training_job is None
    with pytest.raises(ValueError):
        arbiter.begin_training("b", devices=0)
    assert visible_devices((0, 1), None) == "0,1"
    assert visible_devices((0, 1), "3, 5,7") == "3,5"  # the server's own CUDA_VISIBLE_DEVICES
    command = torchrun_command(1234, 4, Path("/tmp/x"))
    assert command[:4] == [sys.executable, "-m", "lorastudio.jobs.agent", "1234"]
    assert "--nproc-per-node=4" in command and command[-2:] == ["-m", "lorastudio.jobs.rank_worker"]


# -- slower: a full 2-rank run, a resume on 2 ranks, the CLI -----------------------------------------
@pytest.mark.slow
def test_a_two_rank_job_completes_and_a_two_rank_resume_continues_it(
    dp_settings: Settings, model: Path
) -> None:
    service = _service(dp_settings)
    try:
        done = service.submit(dp_config(model, num_gpus=2, output_name="full"))
        snap = wait_job(service, done["id"], lambda s: s["status"] in FINAL, 240, "the run")
        assert snap["status"] == "completed", snap["error"]
        assert assert_one_set_of_events(job_events(service, done["id"]), ranks=2) == [1, 2, 3, 4]
        full = load_file(str(snap["lora_path"]))
        assert (
            dp_settings.logs_dir / f"{done['id']}.log"
        ).is_file()  # rank 0's own lines (jobs/worker_log.py)

        job = service.submit(dp_config(model, num_gpus=2, steps=10, output_name="halves"))
        wait_job(service, job["id"], lambda s: (s["progress"] or {}).get("step", 0) >= 2, 240, "step 2")
        service.stop(save=True)
        assert (
            wait_job(service, job["id"], lambda s: s["status"] in FINAL, 60, "the stop")["status"]
            == "stopped"
        )
        resumed = service.submit_resume(job["id"])  # num_gpus=2 from the checkpoint
        final = wait_job(service, resumed["id"], lambda s: s["status"] in FINAL, 240, "the resume")
        assert final["status"] == "completed", final["error"]
        halves = load_file(str(final["lora_path"]))
    finally:
        service.shutdown()
    assert_same_lora(full, single_process_lora(dp_settings, model, output_name="single4"))
    assert_same_lora(halves, single_process_lora(dp_settings, model, steps=10, output_name="single10"))


@pytest.mark.slow
def test_the_cli_launches_two_gloo_ranks_through_torchrun(
    settings: Settings, model: Path, tmp_path: Path
) -> None:
    config = tmp_path / "run.json"
    raw = dp_config(model, output_name="cli")
    config.write_text(json.dumps(raw))
    env = {**os.environ, "LORASTUDIO_HOME": str(settings.home), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "lorastudio.cli", "train", str(config), "--gpus", "2", "--device", "cpu"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "launching 2 processes: torchrun --standalone" in proc.stderr
    assert proc.stdout.count("done: 4 step(s)") == 1  # rank 0 reports, once
    got = load_file(str(settings.outputs_dir / "cli" / "cli.safetensors"))
    assert_same_lora(got, single_process_lora(settings, model, output_name="single"))


# -- the CLI's pieces (cheap) -----------------------------------------------------------------------
def test_the_cli_refuses_more_gpus_than_the_host_has_before_launching(
    settings: Settings, model: Path, tmp_path: Path
) -> None:
    config = tmp_path / "run.json"
    config.write_text(json.dumps(dp_config(model, data_dir=str(settings.datasets_dir / "shapes"))))
    _register()
    result = CliRunner().invoke(app, ["train", str(config), "--gpus", "2"])
    assert result.exit_code == 2
    assert "this host has 0" in result.output and "--device cpu" in result.output
    assert not settings.outputs_dir.exists() or not any(settings.outputs_dir.iterdir())
    assert launch_arguments(config, ["num_gpus=2"], "cpu", None) == [
        "-m",
        "lorastudio.cli",
        "train",
        str(config.resolve()),
        "--set",
        "num_gpus=2",
        "--device",
        "cpu",
    ]


def test_the_plan_is_printed_as_one_readable_line() -> None:
    trial = PlanTrial(
        base_precision="bf16",
        gradient_checkpointing="off",
        offload_blocks=0,
        micro_batch_size=2,
        seconds_per_sample=math.nan,
        peak_memory_gb=None,
        fits=False,
    )
    event = PlanChosen(
        base_precision="fp8",
        gradient_checkpointing="selective",
        offload_blocks=1,
        micro_batch_size=2,
        compile=True,
        attention_backend="cudnn",
        memory_budget_gb=40.0,
        decided_by="measured",
        trials=[trial, trial],
        fallbacks=["nf4: needs CUDA"],
    )
    line = plan_line(event)
    assert line == (
        "plan: base fp8, checkpointing selective, offload 1 block, micro-batch 2, compile on, "
        "attention cudnn; measured (2 trials), budget 40 GB; fallbacks: nf4: needs CUDA"
    )
    assert "\n" not in line
    plain = plan_line(
        event.model_copy(update={"decided_by": "settings", "memory_budget_gb": None, "fallbacks": []})
    )
    assert plain.endswith("compile on, attention cudnn; set by the settings")
    wide = plan_line(event.model_copy(update={"compile_regions": "wide + CUDA graphs"}))
    assert "micro-batch 2, compile wide + CUDA graphs, attention cudnn" in wide


# -- CUDA (marker gpu; the lead's H200 runs): what only GPUs can show ---------------------------------
def _cuda_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.gpu
@pytest.mark.skipif(_cuda_count() < 1, reason="needs a CUDA GPU")
def test_one_gpu_rank_through_the_launcher_trains_on_the_reserved_gpu(
    settings: Settings, model: Path
) -> None:
    """The launcher path (agent, rank_worker, channel, CUDA_VISIBLE_DEVICES) with one rank on
    GPU 0: the run completes with rank 0's events, as a spawned worker's would."""
    from lorastudio.jobs.launcher import TorchrunWorker

    raw = dp_config(model, steps=3, output_name="one") | {"data_dir": str(settings.datasets_dir / "shapes")}
    worker = TorchrunWorker("one", 1, TrainConfig.model_validate(raw), settings, devices=(0,))
    pid = worker.start()
    events = []
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not any(e["type"] in ("complete", "error") for e in events):
            item = worker.next_event(0.5)
            if item is not None:
                assert item[:2] == (1, pid)  # tagged (generation, agent pid)
                events.append(item[2])
        assert worker.join(30)
    finally:
        worker.kill()
        worker.close()
    assert events[-1]["type"] == "complete", events[-1]
    assert (settings.outputs_dir / "one" / "one.safetensors").is_file()


@pytest.mark.gpu
@pytest.mark.skipif(_cuda_count() < 2, reason="needs 2 CUDA GPUs")
def test_a_two_gpu_job_trains_the_lora_of_one_gpu(settings: Settings, model: Path) -> None:
    """NCCL: DDP gradient averaging, the caches all-gathered, stop polls broadcast, on 2 GPUs
    (fp32 base so that the comparison is tight)."""
    service = _service(settings)
    try:
        job = service.submit(
            dp_config(model, num_gpus=2, base_precision="fp32", enable_tf32=False, output_name="gpu2")
        )
        snap = wait_job(service, job["id"], lambda s: s["status"] in FINAL, 600, "the run")
        assert snap["status"] == "completed", snap["error"]
        assert_one_set_of_events(job_events(service, job["id"]), ranks=2)
        got = load_file(str(snap["lora_path"]))
    finally:
        service.shutdown()
    raw = dp_config(model, base_precision="fp32", enable_tf32=False, output_name="gpu1") | {
        "data_dir": str(settings.datasets_dir / "shapes")
    }
    single = train(TrainConfig.model_validate(raw), [].append, settings=settings, device="cuda")
    assert single.lora_path is not None
    assert_same_lora(got, load_file(str(single.lora_path)))
