"""lora/text_encoders.py and the text-encoder part of the save-time check on synthetic state
dicts: the kohya and diffusers names of both CLIP encoders, alpha folded into the diffusers
lora_B, ComfyUI's CLIP key map, and the check failing on a key no loader reads or a wrong shape."""

from __future__ import annotations

import torch

from lorastudio.lora.portability import check_comfyui, check_diffusers
from lorastudio.lora.text_encoders import clip_key_map, to_diffusers_tensors, to_kohya_tensors

UNET = {"down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q": (64, 64)}
LAYERS = {
    "text_encoder": ("encoder.layers.0.self_attn", 32),
    "text_encoder_2": ("text_model.encoder.layers.0.self_attn", 64),
}
# transformers 5 flattens CLIP-L (no text_model.); CLIP-G keeps it
CLIP = {enc: {f"{pre}.{p}": (n, n) for p in ("q_proj", "out_proj")} for enc, (pre, n) in LAYERS.items()}
PEFT = {
    f"{enc}.{pre}.{p}.lora_{ab}.weight": torch.ones((4, n) if ab == "A" else (n, 4))
    for enc, (pre, n) in LAYERS.items()
    for p in ("q_proj", "out_proj")
    for ab in "AB"
}
UNET_KOHYA = {
    "lora_unet_down_blocks_1_attentions_0_transformer_blocks_0_attn1_to_q.lora_down.weight": torch.ones(
        4, 64
    ),
    "lora_unet_down_blocks_1_attentions_0_transformer_blocks_0_attn1_to_q.lora_up.weight": torch.ones(64, 4),
    "lora_unet_down_blocks_1_attentions_0_transformer_blocks_0_attn1_to_q.alpha": torch.tensor(8.0),
}


def test_the_layouts_name_both_encoders_as_every_loader_reads_them():
    kohya = to_kohya_tensors(PEFT, alpha=8.0)
    assert sorted(k for k in kohya if "q_proj" in k) == [
        "lora_te1_text_model_encoder_layers_0_self_attn_q_proj.alpha",
        "lora_te1_text_model_encoder_layers_0_self_attn_q_proj.lora_down.weight",
        "lora_te1_text_model_encoder_layers_0_self_attn_q_proj.lora_up.weight",
        "lora_te2_text_model_encoder_layers_0_self_attn_q_proj.alpha",
        "lora_te2_text_model_encoder_layers_0_self_attn_q_proj.lora_down.weight",
        "lora_te2_text_model_encoder_layers_0_self_attn_q_proj.lora_up.weight",
    ]
    diffusers = to_diffusers_tensors(PEFT, rank=4, alpha=8.0)
    b = diffusers["text_encoder.text_model.encoder.layers.0.self_attn.q_proj.lora_B.weight"]
    assert torch.equal(b, torch.full((32, 4), 2.0))  # alpha / rank folded in
    key_map = clip_key_map(CLIP)
    assert key_map["lora_te1_text_model_encoder_layers_0_self_attn_q_proj"] == (32, 32)
    assert key_map["text_encoder_2.text_model.encoder.layers.0.self_attn.q_proj"] == (64, 64)
    assert "lora_te2_text_model_encoder_layers_0_self_attn_q_proj" in key_map


def test_the_check_passes_the_files_and_fails_a_key_or_shape_no_loader_takes():
    good = {**UNET_KOHYA, **to_kohya_tensors(PEFT, alpha=8.0)}
    assert check_comfyui(good, {}, "sdxl", UNET, CLIP)["ok"]
    report = check_diffusers(good, "sdxl", UNET, "StableDiffusionXLPipeline", None, CLIP)
    assert report["ok"] and report["loaded"] == 2 + 8, report
    no_out = {k: v for k, v in good.items() if "out_proj" not in k}  # diffusers cannot type such CLIP keys
    report = check_diffusers(no_out, "sdxl", UNET, "StableDiffusionXLPipeline", None, CLIP)
    assert not report["ok"] and "refuses these keys" in report["unknown"][0]
    stray = {
        **good,
        "lora_te1_text_model_encoder_layers_5_self_attn_q_proj.lora_down.weight": torch.ones(4, 32),
    }
    assert (
        "lora_te1_text_model_encoder_layers_5_self_attn_q_proj.lora_down.weight"
        in (check_comfyui(stray, {}, "sdxl", UNET, CLIP)["unconsumed"])
    )
    wide = {**CLIP, "text_encoder": {m: (48, 48) for m in CLIP["text_encoder"]}}  # not the file's encoder
    assert not check_comfyui(good, {}, "sdxl", UNET, wide)["ok"]
    report = check_diffusers(good, "sdxl", UNET, "StableDiffusionXLPipeline", None, wide)
    assert not report["ok"] and report["mismatched"]


def test_a_text_encoder_layer_other_than_clips_is_refused_not_renamed(tmp_path):
    """Only CLIP text-encoder layers have a name in both layouts (`text_model.encoder.layers.N.*`):
    a Qwen-Image file's Qwen2.5-VL layer (`text_encoder.model.layers.0.self_attn.q_proj`) came out
    of `lora convert` as `lora_te1_text_model_model_layers_0_…` / `text_encoder.text_model.model…`,
    names no loader reads. convert, merge and resize refuse it, naming the key."""
    import pytest
    from safetensors.torch import save_file

    from lorastudio.errors import ConfigError
    from lorastudio.lora.files import convert_file
    from lorastudio.lora.ops import resize_file

    denoiser = "transformer.transformer_blocks.0.attn.to_q"
    qwen_vl = "text_encoder.model.layers.0.self_attn.q_proj"
    tensors = {
        f"{m}.lora_{ab}.weight": torch.ones((4, 32) if ab == "A" else (32, 4))
        for m in (denoiser, qwen_vl)
        for ab in "AB"
    }
    src = tmp_path / "qwen-te.safetensors"
    save_file(tensors, src, {"lorastudio.family": "qwen-image"})
    for to in ("kohya", "diffusers"):
        with pytest.raises(ConfigError, match=r"text_encoder\.model\.layers\.0\.self_attn\.q_proj"):
            convert_file(src, tmp_path / f"{to}.safetensors", to)  # type: ignore[arg-type]
        assert not (tmp_path / f"{to}.safetensors").exists()
    with pytest.raises(ConfigError, match=r"text_encoder\.model\.layers\.0\.self_attn\.q_proj"):
        resize_file(src, tmp_path / "r2.safetensors", 2)
