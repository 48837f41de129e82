"""Session 25 resume audit through the job service (what POST /api/train/stop with save and
POST /api/runs/{id}/resume call), tiny models on the CPU: an edit family's run with controls,
masks, EMA and samples handed the standby worker (LORASTUDIO_STANDBY_WORKER=1), stopped and
resumed, and a 2-rank gloo run (the disk cache, crops, caption dropout) stopped and resumed on 2 ranks, each bitwise the uninterrupted
job (losses per step, the LoRA's and the raw EMA file's tensors, every sample PNG)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from PIL import Image, ImageOps
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


@pytest.fixture
def masked_pairs(settings: Settings, sample_dataset: Path) -> str:
    """datasets/pairs: the sample dataset with a control (the colour inverse) and a mask (the
    left half) per image."""
    out = settings.datasets_dir / "pairs"
    (out / "control").mkdir(parents=True)
    (out / "masks").mkdir()
    for image in sorted(sample_dataset.glob("*.png")):
        (out / image.name).write_bytes(image.read_bytes())
        (out / f"{image.stem}.txt").write_bytes(image.with_suffix(".txt").read_bytes())
        with Image.open(image) as source:
            ImageOps.invert(source.convert("RGB")).save(out / "control" / image.name)
            mask = Image.new("L", source.size, 0)
            mask.paste(255, (0, 0, source.size[0] // 2, source.size[1]))
            mask.save(out / "masks" / image.name)
    return "pairs"


@pytest.mark.slow
def test_an_edit_run_on_the_standby_worker_stopped_and_resumed_is_the_uninterrupted_run(
    settings: Settings, tiny_model: Callable[[str], Path], masked_pairs: str
) -> None:
    config = {
        "family": "flux-kontext",
        "base_model": str(tiny_model("flux-kontext")),
        "data_dir": masked_pairs,
        "control_resolution": "target",
        "resolution": 32,
        "steps": 8,
        "batch_size": 2,
        "learning_rate": 5e-3,
        "lora_rank": 4,
        "seed": 7,
        "ema_decay": 0.9,
        "sample_prompts": ["make it red"],
        "sample_every": 2,
        "sample_steps": 2,
        "save_every": 1,
        "latent_cache": "disk",
        "max_sequence_length": 16,
    }
    service = JobService(settings, RunStore.open(settings.db_path), GpuArbiter(), standby=True).start()
    try:
        full = service.submit({**config, "output_name": "full"})
        done = wait_job(service, full["id"], lambda s: s["status"] in FINAL, 240, "the full run")
        assert done["status"] == "completed", done["error"]
        final = _stop_and_resume(service, {**config, "output_name": "part"}, 2, 240)
        assert _losses(service, final["id"]) == _losses(service, full["id"])
        assert len(_losses(service, full["id"])) == 8
    finally:
        service.shutdown()
    _assert_same_outputs(settings.outputs_dir / "full", settings.outputs_dir / "part", samples=True)


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
