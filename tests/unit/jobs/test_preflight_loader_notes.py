"""What the preflight says about the file a run will write: a DoRA or LyCORIS file loads in one
of ComfyUI and diffusers' load_lora_weights only, and the user is told which before training
(the sidecar's loader check says the same after the run, lora/portability.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.jobs.preflight import preflight_report
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings


def _notes(settings: Settings, model: Path, family: str, **over: object) -> list[str]:
    cfg = {"family": family, "base_model": str(model), "data_dir": "shapes", "resolution": 32, "steps": 2}
    run = validate_run({**cfg, **over}, settings, live_output_names=set())
    return preflight_report(run)["family"]["notes"]


@pytest.mark.parametrize("family", ["z-image", "krea2"])
def test_the_preflight_says_which_loader_cannot_read_a_dora_or_lycoris_file(
    family: str, settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    model = tiny_model(family)
    assert not any("load_lora_weights" in n for n in _notes(settings, model, family))  # LoRA: both load it
    dora_diffusers = " ".join(_notes(settings, model, family, adapter="dora", lora_format="diffusers"))
    assert "ComfyUI" in dora_diffusers and "without the DoRA magnitudes" in dora_diffusers
    assert "lora_format = 'kohya'" in dora_diffusers
    dora_kohya = " ".join(_notes(settings, model, family, adapter="dora", lora_format="kohya"))
    assert "diffusers' load_lora_weights cannot load it" in dora_kohya
    assert "lora_format = 'diffusers'" in dora_kohya
    if family == "krea2":  # Z-Image's LoKr file loads in diffusers (below)
        lokr = " ".join(_notes(settings, model, family, adapter="lokr"))
        assert "diffusers' load_lora_weights cannot load it" in lokr and "lora_format" not in lokr


@pytest.mark.parametrize("family", ["flux2", "flux2-klein", "z-image"])
def test_a_flux2_lokr_file_is_not_said_to_fail_in_diffusers(
    family: str, settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    """diffusers 0.42 reads FLUX.2's LyCORIS LoKr files (RELIABILITY 1501) and Z-Image's
    `diffusion_model.<diffusers name>` ones (RELIABILITY 1700): no note, as for a LoRA; a LoHa
    file of the same family still has its note."""
    model = tiny_model(family)
    assert not any("load_lora_weights" in n for n in _notes(settings, model, family, adapter="lokr"))
    loha = " ".join(_notes(settings, model, family, adapter="loha"))
    assert "diffusers' load_lora_weights cannot load it" in loha
