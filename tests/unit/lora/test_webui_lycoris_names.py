"""SDXL LoHa / LoKr files under kohya's LoRA names (RELIABILITY 1980): A1111's built-in Lora
extension matches only `lora_unet_` / `lora_te*_` layer names (its networks.load_network: a
`lycoris_<diffusers name>` layer is left unmatched, so such a file loaded nothing there:
bench/webui_check.py, session 39 portable3). The writer now names an SDXL LoHa / LoKr layer
`lora_unet_<SGM name>` (kohya sd-scripts' LyCORIS spelling): A1111 finds it as the module
`diffusion_model.<SGM name>` of its model, ComfyUI maps the same name to the same weight (checked
against ComfyUI's own key map, tests/data/comfyui_key_map.json.gz), and lorastudio's generation /
init_lora reader resolves it back to the diffusers layer. DoRA keeps `lycoris_` (its dora_scale
reading: lora/lycoris.py KOHYA_SPELLED)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from lorastudio.generate.lycoris_names import to_lycoris_names
from lorastudio.lora.lycoris import group_modules, kohya_spelling, layer_key, module_key, peft_to_lycoris
from lorastudio.lora.names import sdxl_from_original

# ComfyUI's own map of the tiny SDXL U-Net: {LoRA layer name: "diffusion_model.<SGM name>.weight"}
SDXL = json.loads(
    gzip.decompress((Path(__file__).parents[2] / "data" / "comfyui_key_map.json.gz").read_bytes())
)["families"]["sdxl"]
# the attention projections (what a run targets by default) by their diffusers names
LAYERS = sorted(
    sdxl_from_original(target.removeprefix("diffusion_model.").removesuffix(".weight"))
    for key, target in SDXL.items()
    if key.startswith("lycoris_") and "_attn" in key
)
PARTS = {
    "loha": {"hada_w1_a": (4, 2), "hada_w1_b": (2, 4), "hada_w2_a": (4, 2), "hada_w2_b": (2, 4)},
    "lokr": {"lokr_w1": (2, 2), "lokr_w2": (2, 2)},
}


@pytest.mark.parametrize("adapter", ["loha", "lokr"])
def test_an_sdxl_loha_or_lokr_file_names_each_layer_as_a1111_matches_it(adapter):
    assert LAYERS and kohya_spelling("sdxl", adapter)
    peft = {f"{m}.{name}": torch.randn(shape) for m in LAYERS for name, shape in PARTS[adapter].items()}
    tensors = peft_to_lycoris(
        peft, adapter, {m: (2, 4.0) for m in LAYERS}, kohya=kohya_spelling("sdxl", adapter)
    )
    layers = {k.split(".")[0] for k in tensors}
    assert len(layers) == len(LAYERS) and all(k.startswith("lora_unet_") for k in layers)
    for layer in layers:
        # A1111 (networks.load_network): "lora_unet" -> "diffusion_model", a module of its SGM model
        target = SDXL[layer]  # ComfyUI maps the name too, to that module's weight
        assert layer.replace("lora_unet", "diffusion_model", 1) == target.removesuffix(".weight").replace(
            ".", "_"
        )
    # lorastudio's own reader (generation, init_lora) resolves each to its diffusers layer
    resolved = to_lycoris_names(group_modules(tensors), "StableDiffusionXLPipeline")
    assert {t.keys for t, _ in resolved.values()} == {(module_key(m),) for m in LAYERS}


def test_a_layer_the_sgm_table_does_not_name_keeps_the_lycoris_name_comfyui_maps():
    assert (
        layer_key("down_blocks.0.downsamplers.0.conv", kohya=True)
        == "lycoris_down_blocks_0_downsamplers_0_conv"
    )
    assert "lycoris_down_blocks_0_downsamplers_0_conv" in SDXL


def test_sdxl_dora_and_the_other_families_keep_their_spelling():
    assert not kohya_spelling("sdxl", "dora")
    assert not any(kohya_spelling(f, a) for f in ("flux", "z-image", "qwen-image") for a in ("loha", "lokr"))


def test_the_sidecar_says_which_lycoris_files_a1111_loads():
    from lorastudio.training.adapters.lycoris_export import a1111_forge_verdict

    loha = peft_to_lycoris(
        {f"{m}.{n}": torch.randn(s) for m in LAYERS[:2] for n, s in PARTS["loha"].items()},
        "loha",
        {m: (2, 4.0) for m in LAYERS[:2]},
        kohya=True,
    )
    assert a1111_forge_verdict(loha, "sdxl", "loha")["ok"] is True
    dora = {f"{module_key(LAYERS[0])}.dora_scale": torch.ones(4, 1)}
    verdict = a1111_forge_verdict(dora, "sdxl", "dora")
    assert verdict["ok"] is False and verdict["unmatched"] == [module_key(LAYERS[0])]
    assert a1111_forge_verdict(loha, "flux", "loha")["checked"] is False
