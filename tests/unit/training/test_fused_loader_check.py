"""The save-time loader check of a fused-projection run (RELIABILITY 680): the members of a fused
group (training/speed/fused_projections.FusedSlice) have no weight parameter of their own, so the
denoiser's module shapes the check reads (export.base_weight_shapes) left them out, and every
`fuse_projections = "on"` run (and every `auto` one CUDA fuses) was told that ComfyUI and diffusers
would not load its file as trained, its to_q / to_k / to_v / add_*_proj keys "unknown", although
the file is the unfused run's. Found by the session 28 fuzz audit (tests/config_fuzz.py)."""

from __future__ import annotations

import json

import pytest

from lorastudio import families
from lorastudio.training.loop import train

FUSED_FAMILIES = [n for n in families.names() if families.get(n).spec.fused_projection_groups]


def _loaders(make_config, family: str, fuse: str, **over) -> dict:
    cfg = make_config(family, fuse_projections=fuse, output_name=f"{family}-{fuse}", **over)
    result = train(cfg, lambda _: None, device="cpu")
    return json.loads(result.lora_path.with_suffix(".json").read_text())["loaders"]


def _verdicts(loaders: dict) -> dict:
    """Each loader's verdict and what it found wrong (the rules' names left out)."""
    keep = ("checked", "ok", "loaded", "dropped", "unknown", "mismatched", "unconsumed", "wrong_strength")
    return {name: {k: v for k, v in check.items() if k in keep} for name, check in loaders.items()}


@pytest.mark.parametrize(("family", "over"), [("flux", {}), ("flux", {"lora_format": "kohya"})])
def test_a_fused_runs_file_passes_the_loader_check_as_the_unfused_one_does(make_config, family, over):
    """(diffusers' kohya FLUX.1 reader asserts on the tiny model's single-block widths, fused or
    not: tests/unit/lora/test_files.FLUX_DOUBLE_ONLY; its verdict is compared, not asserted)"""
    fused = _loaders(make_config, family, "on", **over)
    assert fused["comfyui"]["ok"], json.dumps(fused)[:2000]
    assert fused["diffusers"]["ok"] or over.get("lora_format") == "kohya", json.dumps(fused)[:2000]
    assert _verdicts(fused) == _verdicts(_loaders(make_config, family, "off", **over))


@pytest.mark.slow
@pytest.mark.parametrize("family", FUSED_FAMILIES)
@pytest.mark.parametrize("over", [{}, {"lora_format": "kohya"}])  # (DoRA / LoHa / LoKr run unfused)
def test_every_fused_familys_loader_check_is_the_unfused_ones(make_config, family, over):
    assert _verdicts(_loaders(make_config, family, "on", **over)) == _verdicts(
        _loaders(make_config, family, "off", **over)
    )
