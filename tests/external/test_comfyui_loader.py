"""ComfyUI's own LoRA loader on lorastudio's files of every adapter kind (bench/comfyui_check.py):
for every family ComfyUI has and every case of CASES (LoRA in the family's default layout and in
its kohya layout; DoRA, LoHa and LoKr in the LyCORIS layout, LoKr with full and with low-rank
factors; bf16 and fp16 files), a 3-step tiny run's file goes through ComfyUI's
`comfy.sd.load_lora_for_models` and `ModelPatcher.patch_weight_to_device` (ComfyUI's code, in a
process of its own) and every patched weight equals the trained change (peft's merged weight
minus the base) within the case's tolerance; no key is left unloaded and ComfyUI logs no failed
patch. At strength 0.5 (each adapter kind once) every patched weight moves by half the
trained change. FLUX.2's diffusers layout loads too. The SDXL diffusers layout and a DoRA file in the
diffusers layout are the counter-examples the defaults avoid.

Needs a ComfyUI checkout (not on PyPI, never vendored): LORASTUDIO_COMFYUI=/path/to/ComfyUI, and
its extra dependencies in LORASTUDIO_COMFYUI_DEPS (see bench/comfyui_check.py). Skipped without.
Krea 2 is a ComfyUI model since after v0.19.3: with a checkout that has it (checked with v0.33.0,
upstream commit 2f35f4a0) its files go through the same loader (both layouts, every adapter
kind); with v0.19.3 its cases are skipped (no comfy.model_base.Krea2). Checked again, every
family and case, with upstream de6b062f (2026-08-20, v0.33.0 + 34 commits; deps comfy-kitchen
0.2.31, comfy-aimdo 0.4.13, einops, scipy, torchsde, trampoline): all pass (session 25).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from bench.comfyui_check import CASES, COMFY_MODEL, CONV_FAMILIES, TOLERANCE, check_family
from safetensors.torch import load_file

from comfyui_env import COMFYUI, DEPS, NEEDS_COMFYUI
from lorastudio import families
from lorastudio.lora.files import FP32_PARTS

pytestmark = NEEDS_COMFYUI
# the factors each case's file must hold (so that the case exercises the reader it names)
FILE_KEYS = {
    "lora": set(),
    "lora-kohya": {"alpha"},  # the per-layer alpha ComfyUI reads
    "dora": {"dora_scale", "lora_up.weight", "lora_down.weight", "alpha"},
    "loha": {"hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b", "alpha"},
    "lokr": {"lokr_w1", "alpha"},  # w2 full or low-rank, as the tiny widths make it
    "lokr-full": {"lokr_w1", "lokr_w2", "alpha"},
    "lokr-lowrank-w2": {"lokr_w1", "lokr_w2_a", "lokr_w2_b", "alpha"},
    "lokr-lowrank-w1": {"lokr_w1_a", "lokr_w1_b", "lokr_w2", "alpha"},
    "dora-bf16": {"dora_scale", "lora_up.weight", "lora_down.weight", "alpha"},
    "lora-bf16": set(),
    "loha-bf16": {"hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b", "alpha"},
    "lokr-bf16": {"lokr_w1", "alpha"},
    "lora-fp16": set(),
}
FILE_KEYS |= {f"conv-{a}": FILE_KEYS[a] for a in ("lora", "dora", "loha", "lokr")}
FILE_KEYS["conv-lokr"] = {"lokr_w1", "lokr_w2", "alpha"}  # a conv's w2 holds its kernel: never low-rank here
FP32_CASES = [c for c in CASES if "save_dtype" not in CASES[c] and not c.startswith("conv-")]
CONV_CASES = [c for c in CASES if c.startswith("conv-")]
# "lora-kohya" where the kohya layout is not the family's default (there it is the "lora" case)
KOHYA_DEFAULT = {f for f in COMFY_MODEL if families.get(f).spec.defaults.get("lora_format") == "kohya"}
FP32_RUNS = [
    (f, c) for f in COMFY_MODEL for c in FP32_CASES if not (c == "lora-kohya" and f in KOHYA_DEFAULT)
]


def _assert_loaded_at_the_trained_strength(result: dict, case: str) -> None:
    if result.get("skipped"):  # a family this ComfyUI has no model for (Krea 2 before v0.2x)
        pytest.skip(result["skipped"])
    assert result["ok"], result
    assert result["not_loaded"] == [] and result["comfy_errors"] == []
    assert result["patched_weights"] >= result["expected_weights"] > 0
    assert FILE_KEYS[case] <= set(result["file_keys"]), result["file_keys"]
    assert result["worst_relative_error"] <= result["tolerance"]


@pytest.mark.parametrize(("family", "case"), FP32_RUNS)
def test_comfyuis_loader_applies_each_adapter_file_at_the_trained_strength(family, case, tmp_path):
    result = check_family(family, COMFYUI, tmp_path, DEPS, case=case)
    _assert_loaded_at_the_trained_strength(result, case)
    assert result["tolerance"] == TOLERANCE["fp32"]


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("family", CONV_FAMILIES)
def test_conv_layers_of_each_adapter_kind_load_at_the_trained_strength(family, case, tmp_path):
    result = check_family(family, COMFYUI, tmp_path, DEPS, case=case)
    _assert_loaded_at_the_trained_strength(result, case)
    assert result["conv_weights"] > 0  # 3x3 conv weights among the patched ones
    sidecar = json.loads(Path(result["lora"]).with_suffix(".json").read_text())
    assert sidecar["loaders"]["comfyui"]["ok"], sidecar["loaders"]["comfyui"]  # the save-time check agrees


# half-precision files: each kind once, over several families (the layouts are the fp32 cases')
HALF_RUNS = [
    ("sdxl", "dora-bf16"),
    ("flux", "lora-bf16"),
    ("z-image", "loha-bf16"),
    ("flux2", "lokr-bf16"),
    ("sdxl", "lora-fp16"),
]


@pytest.mark.parametrize(("family", "case"), HALF_RUNS)
def test_a_half_precision_file_loads_at_the_trained_strength_within_its_rounding(family, case, tmp_path):
    result = check_family(family, COMFYUI, tmp_path, DEPS, case=case)
    _assert_loaded_at_the_trained_strength(result, case)
    dtype = CASES[case]["save_dtype"]
    assert result["tolerance"] == TOLERANCE[dtype]
    want = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    tensors = load_file(result["lora"])
    assert {v.dtype for k, v in tensors.items() if not k.endswith(FP32_PARTS)} == {want}


# strength 0.5: each adapter kind once, over several families and both layouts
HALF_STRENGTH_RUNS = [
    ("sdxl", "dora"),
    ("flux", "lora"),
    ("z-image", "loha"),
    ("flux2", "lokr"),
    ("qwen-image", "lora-kohya"),
    ("krea2", "lokr-lowrank-w1"),
    ("sdxl", "conv-lora"),
    # session 38 comfyreal2: every other adapter case at 0.5 too
    ("chroma", "loha"),
    ("krea2", "dora"),
    ("flux-kontext", "lokr-full"),
    ("qwen-image-edit", "lokr-lowrank-w2"),
    ("sdxl", "conv-dora"),
    ("sdxl", "conv-loha"),
    ("sdxl", "conv-lokr"),
    ("z-image", "lora-bf16"),
    ("flux2-klein", "lora-fp16"),
]


@pytest.mark.parametrize(("family", "case"), HALF_STRENGTH_RUNS)
def test_each_adapter_kind_at_half_strength_patches_half_the_trained_change(family, case, tmp_path):
    """ComfyUI's LoraLoader at 0.5: every patched weight moves by half the trained change (a
    DoRA's too: ComfyUI scales the change to its decomposed weight)."""
    result = check_family(family, COMFYUI, tmp_path, DEPS, case=case, strength=0.5)
    assert result["strength"] == 0.5
    _assert_loaded_at_the_trained_strength(result, case)


@pytest.mark.parametrize("family", ["flux2", "flux2-klein", "krea2"])
def test_comfyui_loads_a_flux2_or_krea2_file_in_the_diffusers_layout_too(family, tmp_path):
    """FLUX.2 is a Flux class in ComfyUI: FLUX.1's diffusers table maps its diffusers names;
    Krea 2's own table (krea2_to_diffusers) maps its diffusers names."""
    result = check_family(family, COMFYUI, tmp_path, DEPS, "diffusers")
    _assert_loaded_at_the_trained_strength(result, "lora")
    assert json.loads(Path(result["lora"]).with_suffix(".json").read_text())["loaders"]["comfyui"]["ok"]


def test_comfyui_loads_nothing_of_an_sdxl_file_in_the_diffusers_layout(tmp_path):
    result = check_family("sdxl", COMFYUI, tmp_path, DEPS, "diffusers")
    assert result["ok"] is False and result["patched_weights"] == 0
    assert len(result["not_loaded"]) == result["lora_keys"] > 0


def test_a_diffusers_layout_dora_file_loses_its_magnitudes_in_comfyui_as_its_sidecar_says(tmp_path):
    """The diffusers layout is diffusers' DoRA (peft's lora_magnitude_vector): ComfyUI reads its
    LoRA pairs and leaves every magnitude unloaded, which the save-time check names."""
    result = check_family("flux", COMFYUI, tmp_path, DEPS, "diffusers", case="dora")
    assert result["ok"] is False
    unloaded = {line.rsplit(" ", 1)[-1] for line in result["not_loaded"]}
    magnitudes = {k for k in result["file_keys"] if k == "lora_magnitude_vector"}
    assert magnitudes and unloaded and all(k.endswith(".lora_magnitude_vector") for k in unloaded)
    sidecar = json.loads(Path(result["lora"]).with_suffix(".json").read_text())
    assert sidecar["loaders"]["comfyui"]["ok"] is False
    assert set(sidecar["loaders"]["comfyui"]["unconsumed"]) == unloaded
