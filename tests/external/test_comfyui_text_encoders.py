"""ComfyUI's own loader on lorastudio's kohya files WITH text-encoder layers
(bench/comfyui_te_check.py): SDXL's own train_text_encoder run (U-Net + CLIP-L + CLIP-G), and
OneTrainer's SDXL (CLIP-G's text_projection included) and FLUX.1 (CLIP-L + T5) files written by
`lora convert --to kohya`. ComfyUI's `load_lora_for_models(model, clip, ...)` must map every key
(model_lora_keys_unet + model_lora_keys_clip: nothing "not loaded") and patch every CLIP / T5 /
denoiser weight by the expected change (alpha / rank scaling included), nothing else.

Needs a ComfyUI checkout (LORASTUDIO_COMFYUI, deps in LORASTUDIO_COMFYUI_DEPS); skipped without.
Checked with ComfyUI v0.33.0 (2f35f4a0) and upstream de6b062f (2026-08-20, v0.33.0 + 34
commits): all pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench.comfyui_check import TOLERANCE
from bench.comfyui_te_check import TE_CASES, check_te_case, onetrainer_case
from safetensors.torch import load_file

from comfyui_env import COMFYUI, DEPS, NEEDS_COMFYUI

pytestmark = NEEDS_COMFYUI
# ComfyUI weight-name prefixes each case must patch (every encoder of the file)
ENCODERS = {
    "sdxl-trained": {"clip_l.transformer.", "clip_g.transformer."},
    "sdxl-convert": {"clip_l.transformer.", "clip_g.transformer."},
    "flux-convert": {"clip_l.transformer.", "t5xxl.transformer."},
    "chroma-convert": {"t5xxl.transformer."},
    "flux-te-only": {"clip_l.transformer.", "t5xxl.transformer."},
}


@pytest.mark.parametrize("case", TE_CASES)
def test_comfyui_maps_every_text_encoder_key_onto_its_weight_at_the_trained_change(case, tmp_path):
    result = check_te_case(case, COMFYUI, tmp_path, DEPS)
    assert result["ok"], result
    assert result["not_loaded"] == [] and result["comfy_errors"] == [] and result["errors"] == []
    if case.endswith("te-only"):  # no denoiser part: ComfyUI patches none of its weights
        assert result["patched_weights"] == result["expected_weights"] == 0
    else:
        assert result["patched_weights"] >= result["expected_weights"] > 0
    assert result["patched_text_encoder_weights"] >= result["expected_text_encoder_weights"] > 0
    assert result["worst_relative_error"] <= TOLERANCE["fp32"]
    patched = result["text_encoder_patched"]
    assert {p for p in ENCODERS[case] if any(k.startswith(p) for k in patched)} == ENCODERS[case]
    keys = load_file(result["lora"])
    want = {"te1"} if case.startswith("chroma") else {"te1", "te2"}
    assert {k.split("_")[1] for k in keys if k.startswith("lora_te")} == want
    downs = [k.removesuffix(".lora_down.weight") for k in keys if k.endswith(".lora_down.weight")]
    assert all(f"{name}.alpha" in keys for name in downs)  # alpha != rank here: ComfyUI reads it
    if case == "sdxl-convert":  # CLIP-G's projection, OneTrainer's name ComfyUI maps
        assert "clip_g.transformer.text_projection.weight" in patched
    if case == "flux-convert":  # T5's gated feed-forward and attention
        assert any(k.endswith("DenseReluDense.wi_1.weight") for k in patched)
    if case == "sdxl-trained":  # the save-time check agrees
        sidecar = json.loads(Path(result["lora"]).with_suffix(".json").read_text())
        assert sidecar["loaders"]["comfyui"]["ok"], sidecar["loaders"]["comfyui"]


def test_onetrainers_own_chroma_file_leaves_its_t5_keys_unloaded_in_comfyui(tmp_path):
    """The counter-example: OneTrainer's Chroma wrapper writes T5 as `lora_te_`, which ComfyUI's
    Chroma map (T5 alone: `lora_te1_`) does not name; the converted file above loads."""
    result = onetrainer_case(COMFYUI, tmp_path, DEPS)
    assert result["ok"] is False and result["patched_text_encoder_weights"] == 0
    unloaded = {line.rsplit(" ", 1)[-1] for line in result["not_loaded"]}
    assert unloaded and all(k.startswith("lora_te_encoder_block_") for k in unloaded)
