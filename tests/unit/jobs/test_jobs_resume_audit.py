"""Session 25 resume audit through the job service (what POST /api/train/stop with save and
POST /api/runs/{id}/resume call), tiny FLUX.1 on the CPU: a 2-rank gloo run (EMA, the disk
cache, crops, caption dropout) stopped and resumed on 2 ranks is bitwise the uninterrupted
2-rank job (losses per step, the LoRA's and the raw EMA file's tensors). The standby worker's
case: tests/api/test_api_standby.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from dp_jobs import FINAL, dp_config, wait_job
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.service import JobService
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings


def _outputs(run_dir: Path) -> dict[str, object]:
    """The LoRA files' tensors and the sample PNGs' pixels of a run folder (checkpoints left out)."""
    out: dict[str, object] = {}
    for path in sorted(run_dir.rglob("*")):
        rel = path.relative_to(run_dir)
        if rel.parts[0] == "checkpoints" or not path.is_file():
            continue
        key = str(rel).replace(run_dir.name, "RUN")
        if path.suffix == ".safetensors":
            out[key] = load_file(str(path))
        elif path.suffix == ".png":
            out[key] = Image.open(path).tobytes()
    return out


def _assert_same_outputs(a: Path, b: Path, samples: bool) -> None:
    one, two = _outputs(a), _outputs(b)
    assert one.keys() == two.keys() and one
    assert any(k.endswith(".raw.safetensors") for k in one), list(one)  # the raw EMA file
    assert any(k.endswith(".png") for k in one) == samples, list(one)
    for key, value in one.items():
        if isinstance(value, dict):
            assert value.keys() == two[key].keys(), key  # type: ignore[union-attr]
            assert all(torch.equal(value[k], two[key][k]) for k in value), key  # type: ignore[index]
        else:
            assert value == two[key], key


def _losses(service: JobService, *job_ids: str) -> list[float]:
    """The per-step losses of a run (its resume's record starts with the original's history)."""
    return [float(m["loss"]) for m in service.store.get_run(job_ids[-1])["metrics"] if "loss" in m]


def _stop_and_resume(service: JobService, config: dict, at: int, timeout: float) -> dict:
    job = service.submit(config)
    wait_job(service, job["id"], lambda s: (s["progress"] or {}).get("step", 0) >= at, timeout, f"step {at}")
    service.stop(save=True)
    stopped = wait_job(service, job["id"], lambda s: s["status"] in FINAL, timeout, "the stop")
    assert stopped["status"] == "stopped", stopped["error"]
    assert stopped["steps_run"] < config["steps"]
    resumed = service.submit_resume(job["id"])
    final = wait_job(service, resumed["id"], lambda s: s["status"] in FINAL, timeout, "the resume")
    assert final["status"] == "completed", final["error"]
    return final


@pytest.mark.slow
def test_two_gloo_ranks_stopped_and_resumed_are_the_uninterrupted_two_rank_run(
    settings: Settings, tiny_model: Callable[[str], Path], shapes: Path
) -> None:
    dp = settings.model_copy(update={"cpu_data_parallel": True})
    model = tiny_model("flux")
    config = dp_config(
        model, num_gpus=2, steps=8, save_every=1, ema_decay=0.9, seed=3, latent_cache="disk", random_crop=True,
        cache_variants=2, caption_dropout=0.2,
    )  # fmt: skip
    service = JobService(dp, RunStore.open(dp.db_path), GpuArbiter()).start()
    try:
        full = service.submit({**config, "output_name": "full"})
        done = wait_job(service, full["id"], lambda s: s["status"] in FINAL, 240, "the full run")
        assert done["status"] == "completed", done["error"]
        final = _stop_and_resume(service, {**config, "output_name": "part"}, 2, 240)
        assert _losses(service, final["id"]) == _losses(service, full["id"])
    finally:
        service.shutdown()
    _assert_same_outputs(dp.outputs_dir / "full", dp.outputs_dir / "part", samples=False)
