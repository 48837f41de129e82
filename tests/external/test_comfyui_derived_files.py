"""ComfyUI's own loader on the files lorastudio derives from a run (bench/comfyui_derived_check.py):
`lora convert` both ways, `lora merge`, `lora resize`, a resumed run's file, an EMA run's file and
the raw file beside it; each goes through ComfyUI's `load_lora_for_models` +
`patch_weight_to_device` and every patched weight must be the expected change (the trained
change, its weighted sum, its best rank-2 approximation, the EMA file's own) within fp32
rounding, nothing unloaded, no patch error. At 0.5 a merged and a resized file move half as far.

Needs a ComfyUI checkout (LORASTUDIO_COMFYUI, deps in LORASTUDIO_COMFYUI_DEPS or
LORASTUDIO_COMFYUI_PYTHON); skipped without. Checked with upstream de6b062f (session 38)."""

from __future__ import annotations

import pytest
from bench.comfyui_check import TOLERANCE
from bench.comfyui_derived_check import check_derived

from comfyui_env import COMFYUI, DEPS, NEEDS_COMFYUI

pytestmark = NEEDS_COMFYUI
CELLS = [
    ("flux", "convert-kohya"),  # FLUX.1's default layout is diffusers
    ("flux2", "convert-diffusers"),  # FLUX.2's diffusers layout loads in ComfyUI (SDXL's does not)
    ("flux", "merge"),
    ("flux", "resize"),
    ("flux", "resume"),
    ("flux", "ema"),
    ("flux", "ema-raw"),
    ("sdxl", "merge"),
    ("sdxl", "resize"),
    ("sdxl", "resume"),
    ("sdxl", "ema"),
    ("flux", "resume-lokr"),
    ("z-image", "resume-dora"),
    ("sdxl", "resume-loha"),
    ("qwen-image", "ema-raw-lokr"),
]


def _assert_loaded(result: dict) -> None:
    assert result["ok"], result
    assert result["not_loaded"] == [] and result["comfy_errors"] == []
    assert result["patched_weights"] >= result["expected_weights"] > 0
    assert result["worst_relative_error"] <= TOLERANCE["fp32"]
    assert result["verdict"]["ok"], result["verdict"]  # the save-time check would say so too


@pytest.mark.parametrize(("family", "case"), CELLS)
def test_comfyui_applies_a_derived_file_as_the_change_it_stands_for(family, case, tmp_path):
    _assert_loaded(check_derived(family, case, COMFYUI, tmp_path, DEPS))


@pytest.mark.parametrize(("family", "case"), [("flux", "merge"), ("sdxl", "resize")])
def test_a_derived_file_at_half_strength_moves_half_as_far(family, case, tmp_path):
    result = check_derived(family, case, COMFYUI, tmp_path, DEPS, strength=0.5)
    assert result["strength"] == 0.5
    _assert_loaded(result)
