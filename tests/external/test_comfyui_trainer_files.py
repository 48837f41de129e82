"""The reverse of test_comfyui_loader.py: a LoRA file as ComfyUI's own trainer node writes it
(comfy_extras/nodes_train.py TrainLoraNode + SaveLoRA: every layer of the model, LoRA pairs with
a trained `.alpha`, `.diff` for norm weights, `.diff_b` for biases, bf16; named for the tiny
denoiser in ComfyUI's own names by bench/comfyui_trainer_side.py), applied by lorastudio's
`generate.apply_loras`, changes every denoiser weight and bias exactly as ComfyUI's
`load_lora_for_models` patches it (bench/comfyui_trainer_check.py), at strength 1 and 0.5.

Needs a ComfyUI checkout (LORASTUDIO_COMFYUI, deps in LORASTUDIO_COMFYUI_DEPS; see
bench/comfyui_check.py); skipped without. Checked with upstream de6b062f (v0.33.0 + 34 commits,
2026-08-20), every family below.
"""

from __future__ import annotations

import pytest
from bench.comfyui_check import COMFY_MODEL, TOLERANCE
from bench.comfyui_trainer_check import check_trainer_file

from comfyui_env import COMFYUI, DEPS, NEEDS_COMFYUI

pytestmark = NEEDS_COMFYUI
# the full differences each family's trainer file holds (the tiny denoisers' layers in ComfyUI's
# model): `.diff_b` where its layers have biases, `.diff` where ComfyUI holds norm weights
DIFFS = {
    "sdxl": {"diff", "diff_b"},
    "flux": {"diff", "diff_b"},
    "flux-kontext": {"diff", "diff_b"},
    "chroma": {"diff", "diff_b"},
    "z-image": {"diff", "diff_b"},
    "qwen-image": {"diff", "diff_b"},
    "qwen-image-edit": {"diff", "diff_b"},
    "flux2": {"diff"},
    "flux2-klein": {"diff"},
    "krea2": set(),  # ComfyUI's table names no bias or norm weight of it: LoRA pairs alone
}
HALF = ["sdxl", "flux", "z-image", "flux2", "krea2"]


def _assert_applied_as_comfyui_does(result: dict, family: str) -> None:
    if result.get("skipped"):  # a model this ComfyUI lacks (Krea 2 before v0.2x)
        pytest.skip(result["skipped"])
    assert result["ok"], result
    assert result["not_loaded"] == [] and result["comfy_errors"] == [] and result["errors"] == []
    assert result["patched_weights"] == result["expected_weights"] > 0  # nothing else moved, either side
    kinds = set(result["file_keys"])
    assert {"lora_up.weight", "lora_down.weight", "alpha"} <= kinds
    assert kinds & {"diff", "diff_b"} == DIFFS[family]
    assert result["worst_relative_error"] <= TOLERANCE["fp32"]  # both compute from the same bf16 values


@pytest.mark.parametrize("family", list(COMFY_MODEL))
def test_generate_applies_a_comfyui_trainer_file_as_comfyui_does(family, tmp_path):
    _assert_applied_as_comfyui_does(check_trainer_file(family, COMFYUI, tmp_path, DEPS), family)


@pytest.mark.parametrize("family", HALF)
def test_a_comfyui_trainer_file_at_half_strength_moves_every_weight_half_as_far(family, tmp_path):
    result = check_trainer_file(family, COMFYUI, tmp_path, DEPS, strength=0.5)
    assert result["strength"] == 0.5
    _assert_applied_as_comfyui_does(result, family)
