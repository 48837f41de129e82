"""ComfyUI's own LoRA loader on lorastudio's default files (bench/comfyui_check.py): for every
family ComfyUI has, a 3-step tiny run's default file goes through ComfyUI's
`comfy.sd.load_lora_for_models` and `ModelPatcher.patch_weight_to_device` (ComfyUI's code, in a
process of its own) and every patched weight equals the trained (alpha / rank) * B @ A; no key is
left unloaded. The SDXL diffusers layout is the counter-example the default avoids: ComfyUI
loads none of its keys.

Needs a ComfyUI checkout (not on PyPI, never vendored): LORASTUDIO_COMFYUI=/path/to/ComfyUI, and
its extra dependencies in LORASTUDIO_COMFYUI_DEPS (see bench/comfyui_check.py). Skipped without.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from bench.comfyui_check import COMFY_MODEL, check_family

COMFYUI = Path(os.environ.get("LORASTUDIO_COMFYUI", "/nonexistent"))
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (COMFYUI / "comfy" / "lora.py").is_file(), reason="no ComfyUI checkout (LORASTUDIO_COMFYUI)"
    ),
]


@pytest.mark.parametrize("family", list(COMFY_MODEL))
def test_comfyuis_loader_applies_the_default_file_at_the_trained_strength(family, tmp_path):
    result = check_family(family, COMFYUI, tmp_path, os.environ.get("LORASTUDIO_COMFYUI_DEPS"))
    assert result["ok"], result
    assert result["not_loaded"] == [] and result["patched_weights"] >= result["expected_weights"] > 0


def test_comfyui_loads_nothing_of_an_sdxl_file_in_the_diffusers_layout(tmp_path):
    result = check_family("sdxl", COMFYUI, tmp_path, os.environ.get("LORASTUDIO_COMFYUI_DEPS"), "diffusers")
    assert result["ok"] is False and result["patched_weights"] == 0
    assert len(result["not_loaded"]) == result["lora_keys"] > 0
