"""A sample prompt's reference images at the size it renders at, checked before any model loads by
the job service, `train --check` AND the engine's own preflight (RELIABILITY 682): the engine's
preflight checked the references' files but not their size, so a FLUX.2 [klein] run on a paired
dataset at 32 px with a sample prompt was accepted by the engine and trained, and its sample round
failed mid-run (the pipeline's "Image too small: 32x32"); and the job service's rule sized every
prompt at the training resolution, so a prompt of its own width / height under 64 px passed every
check and failed the same way. Found by the session 28 fuzz audit (tests/config_fuzz.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.errors import ConfigError
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings
from lorastudio.tiny.paired import make_paired_dataset
from lorastudio.training.loop import train

SMALL = "flux2-klein takes reference images of at least 64 px a side: render at 64 px or more"


def test_the_engine_refuses_references_too_small_to_render_before_any_load(make_config, small_pairs) -> None:
    paired = {"data_dir": str(small_pairs), "control_resolution": "target"}  # klein's optional controls
    cfg = make_config("flux2-klein", sample_prompts=["a red square"], output_name="small-refs", **paired)
    assert cfg.resolution == 32 and cfg.control_resolution == "target"
    events: list = []
    with pytest.raises(ConfigError) as err:
        train(cfg, events.append, device="cpu")
    assert [(p.field, p.message) for p in err.value.problems] == [
        ("sample_prompts", f"samples with references at resolution 32: {SMALL}")
    ]
    assert not any(e.type in ("loading", "loaded", "step") for e in events)
    own = [{"prompt": "a", "width": 64, "height": 48}]  # 64 px training, a 48 px sample of its own
    cfg = make_config("flux2-klein", resolution=64, sample_prompts=own, output_name="own-size", **paired)
    with pytest.raises(ConfigError, match="sample prompt 0 at 64x48: " + SMALL):
        train(cfg, events.append, device="cpu")


def test_the_job_services_check_sizes_each_prompt_at_its_own_size(
    tiny_model: Callable[[str], Path], studio_home: Path
) -> None:
    settings = Settings(home=studio_home)
    settings.ensure_dirs()
    make_paired_dataset(settings.datasets_dir / "pairs")
    raw = {
        "family": "flux2-klein",
        "base_model": str(tiny_model("flux2-klein")),
        "data_dir": "pairs",
        "resolution": 64,
        "steps": 2,
        "sample_prompts": [{"prompt": "a", "width": 32, "height": 64}, "b", {"prompt": "c", "width": 80}],
    }
    with pytest.raises(ConfigError) as err:
        validate_run(raw, settings, live_output_names=set())
    assert [(p.field, p.message) for p in err.value.problems] == [
        ("sample_prompts", f"sample prompt 0 at 32x64: {SMALL}")
    ]
    raw["sample_prompts"] = ["b", {"prompt": "c", "width": 80}]  # 64 and 80x64: rendered as given
    assert validate_run(raw, settings, live_output_names=set()).config.sample_prompts
