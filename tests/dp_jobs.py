"""Data-parallel job checks shared by tests/unit/jobs/test_multi_gpu_jobs.py and
tests/reliability/test_rank_death.py: the tiny flux config of a 2-rank job, waiting on the job
service, rank 0's events, the launcher's channel folders, the LoRA of the same run in one
process, and the always-on job-level check (a 2-rank job stops and saves, and its checkpoint
resumes in one process), which test_rank_death runs as the next job after a rank's death: both
need a torchrun launch, and one launch fewer is ~7 s of the suite."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from lorastudio.config import TrainConfig
from lorastudio.jobs.service import JobService
from lorastudio.processes import process_alive
from lorastudio.settings import Settings
from lorastudio.training.loop import train

FINAL = {"completed", "stopped", "cancelled", "failed", "interrupted"}
IMAGES = 8  # the sample dataset
# Two processes sum the batch's losses in another order than one: float32 rounding, compounded
# over the steps by Adam; far below what a wrong shard, scale or cache would give.
LORA_ATOL, LORA_RTOL = 1e-5, 1e-3


def dp_config(model: Path, **over: Any) -> dict[str, Any]:
    """A small flux config on datasets/shapes (batches of 2: one image per rank)."""
    base = {
        "family": "flux",
        "base_model": str(model),
        "data_dir": "shapes",
        "resolution": 32,
        "steps": 4,
        "batch_size": 2,
        "learning_rate": 5e-3,
        "lora_rank": 4,
        "output_name": "dp",
    }
    return {**base, **over}


def wait_job(
    service: JobService, job_id: str, done: Callable[[dict], bool], timeout: float, what: str
) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        snap = service.job(job_id)
        if done(snap):
            return snap
        time.sleep(0.02)
    raise AssertionError(
        f"job {job_id} still {service.job(job_id)['status']} after {timeout}s waiting for {what}"
    )


def channel_of(agent_pid: int) -> Path:
    """The launcher's private channel folder (under the temp dir) of the job whose torchrun agent
    is `agent_pid`: the parent of the agent's --log-dir, read from /proc while it runs. Only this
    job's folder: jobs of other tests (another pytest worker) have channel folders of their own."""
    args = Path(f"/proc/{agent_pid}/cmdline").read_bytes().decode().split("\0")
    log_dir = Path(next(a.removeprefix("--log-dir=") for a in args if a.startswith("--log-dir=")))
    assert log_dir.parent.parent == Path(tempfile.gettempdir()), log_dir
    assert log_dir.parent.name.startswith("lorastudio-ranks-"), log_dir
    return log_dir.parent


def job_events(service: JobService, job_id: str) -> list[dict]:
    return [e for _, e in service.events_after(0) if e["job_id"] == job_id]


def single_process_lora(settings: Settings, model: Path, **over: Any) -> dict[str, torch.Tensor]:
    """The LoRA of the same run in this process (one rank, the same global batch and seed)."""
    raw = dp_config(model, **over) | {"data_dir": str(settings.datasets_dir / "shapes"), "num_gpus": 1}
    result = train(TrainConfig.model_validate(raw), [].append, settings=settings, device="cpu")
    assert result.lora_path is not None
    return load_file(str(result.lora_path))


def assert_same_lora(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(expected)
    for key, tensor in expected.items():
        torch.testing.assert_close(got[key], tensor, atol=LORA_ATOL, rtol=LORA_RTOL, msg=key)
    assert any(t.abs().max() > 1e-3 for t in expected.values())  # the LoRA trained


def assert_one_set_of_events(events: list[dict], ranks: int) -> list[int]:
    """Rank 0's events only, once each; returns the progress steps. The latents phase reports
    once per round of `ranks` images: the ranks shared the cache."""
    steps = [e["step"] for e in events if e["type"] == "progress"]
    assert steps == list(range(1, len(steps) + 1))
    assert sum(e["type"] == "complete" for e in events) == 1
    loads = [e["component"] for e in events if e["type"] == "model_load_started"]
    assert sorted(loads) == ["denoiser", "text_encoders", "vae"]
    latents = [e["done"] for e in events if e["type"] == "preparing" and e["phase"] == "latents"]
    assert latents == list(range(ranks, IMAGES + 1, ranks))
    return steps


def two_rank_job_stops_and_saves_and_resumes_in_one_process(
    service: JobService, settings: Settings, model: Path
) -> None:
    """On `service` (settings.cpu_data_parallel): a 2-rank job stops and saves on request, with
    one set of events and files, its agent exits and its channel folder goes, and its checkpoint
    resumes in one process to the LoRA of an uninterrupted one-process run."""
    steps = 12
    ignored = service.ignored_events
    job = service.submit(dp_config(model, num_gpus=2, steps=steps))
    wait_job(service, job["id"], lambda s: (s["progress"] or {}).get("step", 0) >= 2, 240, "step 2")
    channel = channel_of(service.job(job["id"])["pid"])
    assert (channel / "channel.sock").exists()
    service.stop(save=True)
    snap = wait_job(service, job["id"], lambda s: s["status"] in FINAL, 60, "the stop")
    assert snap["status"] == "stopped", snap["error"]
    assert service.arbiter.training_job is None
    stopped_at = assert_one_set_of_events(job_events(service, job["id"]), ranks=2)[-1]
    assert 2 <= stopped_at < steps
    assert service.ignored_events == ignored  # every event came from rank 0, tagged as the agent
    run_dir = settings.outputs_dir / "dp"
    assert snap["lora_path"] == str(run_dir / "dp.safetensors")
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "checkpoints",
        "dp.json",
        "dp.safetensors",
        "loras",
        "losses.bin",
    ]
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == [f"step-{stopped_at:06d}"]
    agent = snap["pid"]
    wait_job(service, job["id"], lambda s: not process_alive(agent), 10, "the agent's exit")
    wait_job(service, job["id"], lambda s: not channel.exists(), 10, "the channel folder removed")

    resumed = service.submit_resume(job["id"], overrides={"num_gpus": 1})
    final = wait_job(service, resumed["id"], lambda s: s["status"] in FINAL, 120, "the resumed run")
    assert final["status"] == "completed", final["error"]
    assert final["steps_run"] == steps
    got = load_file(str(final["lora_path"]))
    assert_same_lora(got, single_process_lora(settings, model, steps=steps, output_name="single"))
