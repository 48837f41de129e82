"""An SDXL-architecture base trained with the EDM objective (Playground v2.5: an
EDMDPMSolverMultistepScheduler, per-channel latents_mean / latents_std in its VAE config) is
refused before any model loads (RELIABILITY 665): SDXL's DDPM objective on scaling-only latents
would train a LoRA that is wrong at inference. Measured first by the maths audit's reference
(tests/families/test_loss_reference.py: the loss diffusers' SDXL script defines for such a VAE)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lorastudio.errors import ConfigError, ModelSourceError
from lorastudio.settings import get_settings
from lorastudio.training.loop import train

# Playground v2.5's scheduler and VAE configs, the values that matter
EDM_SCHEDULER = {
    "_class_name": "EDMDPMSolverMultistepScheduler",
    "sigma_min": 0.002,
    "sigma_max": 80.0,
    "sigma_data": 0.5,
    "sigma_schedule": "exponential",
    "num_train_timesteps": 1000,
    "prediction_type": "epsilon",
}
PER_CHANNEL = {
    "latents_mean": [-1.6574, 1.886, -1.383, 2.5155],
    "latents_std": [8.4927, 5.9022, 6.5498, 5.2299],
}


def _edit(base: Path, name: str, update: dict, replace: bool = False) -> None:
    path = base / name
    path.write_text(json.dumps(update if replace else {**json.loads(path.read_text()), **update}))


@pytest.fixture
def playground_like(tiny_model, tmp_path) -> Path:
    base = tmp_path / "tiny-playground"
    shutil.copytree(tiny_model("sdxl"), base)
    _edit(base, "scheduler/scheduler_config.json", EDM_SCHEDULER, replace=True)
    _edit(base, "vae/config.json", PER_CHANNEL)
    return base


def test_an_edm_sdxl_base_is_refused_before_any_load(make_config, playground_like, small_dataset):
    from lorastudio.jobs.validation import validate_run

    events: list = []
    with pytest.raises(ConfigError) as err:
        train(make_config("sdxl", base_model=str(playground_like)), events.append, device="cpu")
    messages = [p.message for p in err.value.problems if p.field == "base_model"]
    assert len(messages) == 2, err.value.problems
    assert "EDMDPMSolverMultistepScheduler" in messages[0] and "wrong at inference" in messages[0]
    assert "latents_mean / latents_std" in messages[1]
    assert not any(e.type == "model_load_started" for e in events)
    # the job service's validation (torch-free: the configs read as JSON) says the same
    settings = get_settings()
    shutil.copytree(small_dataset, settings.datasets_dir / "shapes", dirs_exist_ok=True)
    raw = {"family": "sdxl", "base_model": str(playground_like), "data_dir": "shapes"}
    with pytest.raises(ConfigError) as err:
        validate_run(raw, settings, live_output_names=set())
    assert [p.field for p in err.value.problems] == ["base_model", "base_model"]


def test_each_config_alone_is_refused_and_the_tiny_sdxl_is_not(tiny_model, tmp_path):
    from lorastudio import families

    sdxl = families.get("sdxl")
    assert sdxl.objective_problems(str(tiny_model("sdxl")), None) == []
    for name, update in (
        ("scheduler/scheduler_config.json", EDM_SCHEDULER),
        ("vae/config.json", PER_CHANNEL),
    ):
        base = tmp_path / name.split("/")[0]
        shutil.copytree(tiny_model("sdxl"), base)
        _edit(base, name, update, replace=name.startswith("scheduler"))
        (problem,) = sdxl.objective_problems(str(base), None)
        assert problem.field == "base_model"


def test_the_ddpm_objective_refuses_an_edm_scheduler():
    from lorastudio.training.noise import DdpmObjective

    with pytest.raises(ModelSourceError, match="EDM"):
        DdpmObjective(EDM_SCHEDULER, None)
