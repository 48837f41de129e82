"""A resume may switch `latent_cache` among the settings that make the run's latents alike
(training/resume/identity_latents.py): memory <-> disk <-> auto, or another latent_cache_max_gb that the
cache still fits, continue the run bitwise; a switch between cached-once and encoded-every-step is
refused naming both; a checkpoint written before the handling was recorded resumes as before."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings
from lorastudio.training.loop import train
from lorastudio.training.resume.checkpoint import INFO_FILE, list_checkpoints
from lorastudio.training.resume.identity_latents import BYTES, HANDLING
from stop_at import stop_at

AUGMENTED = {"random_crop": True, "random_flip": True, "cache_variants": 2, "steps": 3, "save_every": 1}
PLAIN = {"steps": 3, "save_every": 1}  # nothing cached beyond the image itself ("off" refuses variants)


def _stopped(make_config, name: str, step: int, **settings) -> Path:
    """A run stopped (with save) after `step` steps; returns its folder."""
    events, check = stop_at(step)
    first = train(make_config(output_name=name, **settings), events.append, check, device="cpu")
    assert first.stopped and first.steps_run == step
    return get_settings().outputs_dir / name


def _resume(make_config, run_dir: Path, **settings):
    return train(make_config(output_name=run_dir.name, **settings), [].append, device="cpu", resume=run_dir)


def _lora(result) -> dict[str, torch.Tensor]:
    assert result.lora_path is not None
    return load_file(str(result.lora_path))


@pytest.mark.parametrize(("before", "after"), [("memory", "disk"), ("disk", "memory")])
def test_switching_memory_and_disk_on_resume_continues_the_run_bitwise(make_config, before, after):
    full = train(make_config(output_name="full", latent_cache=before, **AUGMENTED), [].append, device="cpu")
    run_dir = _stopped(make_config, "part", 2, latent_cache=before, **AUGMENTED)
    resumed = _resume(make_config, run_dir, latent_cache=after, **AUGMENTED)
    assert resumed.resumed_from == 2 and resumed.losses == full.losses
    lora, expected = _lora(resumed), _lora(full)
    assert lora.keys() == expected.keys() and all(torch.equal(lora[k], expected[k]) for k in lora)


def test_a_switch_that_changes_the_latent_handling_is_refused_naming_both(make_config):
    run_dir = _stopped(make_config, "mem", 1, latent_cache="memory", **PLAIN)
    with pytest.raises(ConfigError) as err:
        _resume(make_config, run_dir, latent_cache="off", **PLAIN)
    (problem,) = err.value.problems
    assert problem.field == "latent_cache"
    assert "cached its latents once, in RAM (latent_cache 'memory'" in problem.message
    assert "would have encoded every step's crops afresh (latent_cache 'off')" in problem.message
    with pytest.raises(ConfigError) as err:  # the budget below the cache: memory encodes every step
        _resume(make_config, run_dir, latent_cache="memory", latent_cache_max_gb=1e-9, **PLAIN)
    (problem,) = err.value.problems
    assert problem.field == "latent_cache_max_gb" and "over latent_cache_max_gb 1e-09" in problem.message
    assert "within latent_cache_max_gb 8" in problem.message  # the checkpoint's: within its budget
    # a budget the cache still fits, and "auto" within it: the same handling, the run goes on
    resumed = _resume(make_config, run_dir, latent_cache="auto", latent_cache_max_gb=2.0, **PLAIN)
    assert resumed.resumed_from == 1 and resumed.steps_run == 3


def test_an_over_budget_memory_run_resumes_only_encoding_every_step(make_config):
    run_dir = _stopped(make_config, "tight", 1, latent_cache="memory", latent_cache_max_gb=1e-9, **PLAIN)
    with pytest.raises(ConfigError) as err:
        _resume(make_config, run_dir, latent_cache="disk", **PLAIN)
    (problem,) = err.value.problems
    assert problem.field == "latent_cache" and "encoded every step's crops afresh" in problem.message
    assert "would have cached its latents once, on disk (latent_cache 'disk')" in problem.message
    resumed = _resume(make_config, run_dir, latent_cache="off", **PLAIN)  # per step, as it was
    assert resumed.resumed_from == 1 and resumed.steps_run == 3


def test_a_checkpoint_from_before_the_handling_resumes_as_it_did(make_config):
    run_dir = _stopped(make_config, "old", 1, latent_cache="memory", **PLAIN)
    (checkpoint,) = list_checkpoints(run_dir)
    info = json.loads((checkpoint / INFO_FILE).read_text())
    for key in (HANDLING, BYTES):  # the identity as written before session 25
        del info["identity"][key]
    (checkpoint / INFO_FILE).write_text(json.dumps(info))
    with pytest.raises(ConfigError) as err:
        _resume(make_config, run_dir, latent_cache="disk", **PLAIN)
    (problem,) = err.value.problems
    assert problem.field == "latent_cache" and 'checkpoint: "memory", this run: "disk"' in problem.message
    assert "written before runs recorded how they made their latents" in problem.message
    resumed = _resume(make_config, run_dir, latent_cache="memory", **PLAIN)
    assert resumed.resumed_from == 1 and resumed.steps_run == 3


def test_the_job_service_takes_a_latent_cache_override(tiny_model, small_dataset, run_settings):
    from lorastudio.jobs.resume import validate_resume
    from lorastudio.jobs.validation import validate_run

    settings = get_settings().ensure_dirs()
    shutil.copytree(small_dataset, settings.datasets_dir / "small")
    raw = run_settings("flux", tiny_model("flux"), Path("small"), {**PLAIN, "output_name": "job"})
    events, check = stop_at(1)
    train(
        validate_run(raw, settings, live_output_names=set()).worker_config, events.append, check, device="cpu"
    )
    run_dir = settings.outputs_dir / "job"
    switched = validate_resume(run_dir, None, {"latent_cache": "disk"}, settings, live_output_names=set())
    assert switched.config.latent_cache == "disk" and switched.step == 1
    with pytest.raises(ConfigError) as err:
        validate_resume(run_dir, None, {"latent_cache": "off"}, settings, live_output_names=set())
    assert [p.field for p in err.value.problems] == ["latent_cache"]
    assert "encoded every step" in err.value.problems[0].message
