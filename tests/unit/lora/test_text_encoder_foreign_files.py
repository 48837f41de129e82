"""Text-encoder layers of OneTrainer's (and kohya's) files in `lora convert`, merge and resize
(lora/text_encoder_names.py): SDXL's CLIP-L and CLIP-G (with its text_projection) beside a U-Net
under its diffusers names, FLUX.1's CLIP-L and T5 beside a transformer; another family's
text-encoder key (Qwen-Image's Qwen2.5-VL) refused naming the key and the reason.

Before: convert refused the SDXL file at its first U-Net key (`lora_unet_down_blocks_…` was
read as an SGM name only) and at CLIG-G's `lora_te2_text_projection`; the FLUX.1 file at its
first T5 key ("not a text-encoder LoRA key"); the Qwen-Image file's `lora_te_…` key was "not a
qwen-image kohya/ComfyUI key", with no reason."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from tests.unit.lora.te_files import chroma_files, flux_files, sdxl_files
from tests.unit.lora.test_ops import _cli

from lorastudio.errors import ConfigError
from lorastudio.generate import load_pipeline
from lorastudio.lora.file_read import read_lora_file
from lorastudio.lora.files import convert_file, peft_from_file
from lorastudio.lora.ops import merge_files, resize_file
from lorastudio.lora.text_encoder_names import resolve
from lorastudio.lora.text_encoders import clip_key_map, folded_peft, split_text_encoders


def _changes(path: Path, family: str) -> dict[str, torch.Tensor]:
    """{layer: its weight change} of a LoRA file, every layer (denoiser and text encoders)."""
    tensors, header = read_lora_file(path)
    denoiser, encoders = split_text_encoders(tensors)
    lora = peft_from_file(denoiser, header, family) if denoiser else None  # none: encoders alone
    scale = lora.alpha / lora.rank if lora is not None else 1.0
    out = {}
    for part in ({} if lora is None else lora.tensors, folded_peft(encoders, header, family)):
        for key, a in part.items():
            if key.endswith(".lora_A.weight"):
                module = key.removesuffix(".lora_A.weight")
                s = scale if lora is not None and part is lora.tensors else 1.0
                out[module] = s * (part[f"{module}.lora_B.weight"] @ a)  # [out, in]
    return out


def _want(theirs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """{the file's layer name (prefix and "_" names): 2 * up @ down} of a te_files file."""
    downs = {
        k.removesuffix(".lora_down.weight"): v for k, v in theirs.items() if k.endswith(".lora_down.weight")
    }
    return {name: 2 * theirs[f"{name}.lora_up.weight"] @ down for name, down in downs.items()}


def _same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], family: str) -> None:
    """`got` (peft names) holds the layers of `want` (the OneTrainer file's names), each with its
    change: every name spelt as OneTrainer spells it."""
    prefixes = {"text_encoder": "lora_te1_", "text_encoder_2": "lora_te2_"}
    spelt = {}
    for module, delta in got.items():
        head, _, rest = module.partition(".")
        if head in prefixes:
            spelt[prefixes[head] + rest.replace(".", "_")] = delta
        else:
            spelt[("lora_unet_" if family == "sdxl" else "lora_transformer_") + module.replace(".", "_")] = (
                delta
            )
    assert spelt.keys() == want.keys()
    for name, delta in want.items():
        torch.testing.assert_close(spelt[name], delta, rtol=1e-5, atol=1e-7, msg=name)


def _convert(src: Path, dst: Path, to: str, family: str) -> Path:
    result = _cli("convert", str(src), str(dst), "--to", to, "--family", family)
    assert result.exit_code == 0, result.output
    return dst


def _bit_identical(a: Path, b: Path) -> None:
    ta, tb = load_file(str(a)), load_file(str(b))
    assert ta.keys() == tb.keys()
    assert all(torch.equal(ta[k], tb[k]) for k in ta), [k for k in ta if not torch.equal(ta[k], tb[k])]


def test_onetrainers_sdxl_file_with_both_clips_converts_and_round_trips(tiny_model, tmp_path):
    pipe = load_pipeline(str(tiny_model("sdxl")), "sdxl", device="cpu")
    theirs, _ = sdxl_files(pipe)
    src = tmp_path / "onetrainer-sdxl.safetensors"
    save_file(theirs, src)
    want = _want(theirs)
    kohya = _convert(src, tmp_path / "k.safetensors", "kohya", "sdxl")
    diffusers = _convert(src, tmp_path / "d.safetensors", "diffusers", "sdxl")
    keys = load_file(str(kohya))
    # ComfyUI's names (comfy/lora.py model_lora_keys_clip): CLIP-L, CLIP-G, CLIP-G's projection
    assert "lora_te1_text_model_encoder_layers_1_self_attn_out_proj.lora_down.weight" in keys
    assert "lora_te2_text_model_encoder_layers_0_mlp_fc2.lora_up.weight" in keys
    assert "lora_te2_text_projection.alpha" in keys
    assert any(k.startswith("lora_unet_input_blocks_4_1_proj_in.") for k in keys)  # SGM, as kohya writes
    assert "text_encoder_2.text_projection.lora_A.weight" in load_file(str(diffusers))
    for path in (kohya, diffusers):
        _same(_changes(path, "sdxl"), want, "sdxl")
    # round trips: diffusers -> kohya -> diffusers and kohya -> kohya, bit for bit
    back = _convert(
        _convert(diffusers, tmp_path / "dk.safetensors", "kohya", "sdxl"),
        tmp_path / "dkd.safetensors",
        "diffusers",
        "sdxl",
    )
    _bit_identical(diffusers, back)
    _bit_identical(kohya, _convert(kohya, tmp_path / "kk.safetensors", "kohya", "sdxl"))


def test_onetrainers_flux_file_with_clip_and_t5_converts_to_kohya_and_refuses_diffusers(tiny_model, tmp_path):
    pipe = load_pipeline(str(tiny_model("flux")), "flux", device="cpu")
    theirs, _, _ = flux_files(pipe)
    src = tmp_path / "onetrainer-flux.safetensors"
    save_file(theirs, src)
    kohya = _convert(src, tmp_path / "k.safetensors", "kohya", "flux")
    keys = load_file(str(kohya))
    assert (
        "lora_te2_encoder_block_1_layer_1_DenseReluDense_wi_1.lora_down.weight" in keys
    )  # ComfyUI's T5 name
    assert "lora_te1_text_model_encoder_layers_0_self_attn_q_proj.alpha" in keys
    _same(_changes(kohya, "flux"), _want(theirs), "flux")
    _bit_identical(kohya, _convert(kohya, tmp_path / "kk.safetensors", "kohya", "flux"))
    # T5 has no diffusers-layout name any loader reads: refused, naming it, nothing written
    result = _cli(
        "convert", str(src), str(tmp_path / "d.safetensors"), "--to", "diffusers", "--family", "flux"
    )
    assert result.exit_code != 0
    told = result.output + str(result.exception)
    assert "text_encoder_2" in told and "no diffusers-layout name" in told and "--to kohya" in told
    assert not (tmp_path / "d.safetensors").exists()


@pytest.mark.parametrize("family", ["sdxl", "flux"])
def test_merge_and_resize_keep_the_text_encoders_layers(family, tiny_model, tmp_path):
    pipe = load_pipeline(str(tiny_model(family)), family, device="cpu")
    theirs = sdxl_files(pipe)[0] if family == "sdxl" else flux_files(pipe)[0]
    src = tmp_path / "theirs.safetensors"
    save_file(theirs, src)
    want = _want(theirs)
    merged = merge_files([(src, 0.25), (src, 0.75)], tmp_path / "m.safetensors", family)
    _same(_changes(merged, family), want, family)
    resized = tmp_path / "r.safetensors"
    resize_file(src, resized, 1, family)  # each layer's best rank-1 part (SVD)
    best = {}
    for name, delta in want.items():
        u, s, vh = torch.linalg.svd(delta.double(), full_matrices=False)
        best[name] = (s[0] * torch.outer(u[:, 0], vh[0])).float()  # [out, in]
    _same(_changes(resized, family), best, family)


def test_a_chroma_file_with_t5_layers_converts_merges_and_resizes(tiny_model, tmp_path):
    """Chroma's one encoder, T5: OneTrainer's `lora_te_` and ComfyUI's `lora_te1_` read alike,
    written as `lora_te1_` (ComfyUI's Chroma name, bench/comfyui_te_check.py); the diffusers
    layout refused naming the layers and the way out. Before: refused ("chroma takes no
    text-encoder LoRA here")."""
    pipe = load_pipeline(str(tiny_model("chroma")), "chroma", device="cpu")
    theirs, _, _ = chroma_files(pipe, "lora_te1_")
    onetrainer, _, _ = chroma_files(pipe, "lora_te_")
    src, ot = tmp_path / "theirs.safetensors", tmp_path / "onetrainer.safetensors"
    save_file(theirs, src)
    save_file(onetrainer, ot)
    kohya = _convert(src, tmp_path / "k.safetensors", "kohya", "chroma")
    assert "lora_te1_encoder_block_1_layer_1_DenseReluDense_wi_1.lora_down.weight" in load_file(str(kohya))
    _same(_changes(kohya, "chroma"), _want(theirs), "chroma")
    _bit_identical(kohya, _convert(ot, tmp_path / "ok.safetensors", "kohya", "chroma"))
    _bit_identical(kohya, _convert(kohya, tmp_path / "kk.safetensors", "kohya", "chroma"))
    merged = merge_files([(src, 0.25), (ot, 0.75)], tmp_path / "m.safetensors", "chroma")
    _same(_changes(merged, "chroma"), _want(theirs), "chroma")
    resize_file(src, tmp_path / "r.safetensors", 1, "chroma")
    assert any(k.startswith("lora_te1_encoder_") for k in load_file(str(tmp_path / "r.safetensors")))
    result = _cli(
        "convert", str(src), str(tmp_path / "d.safetensors"), "--to", "diffusers", "--family", "chroma"
    )
    told = result.output + str(result.exception)
    assert result.exit_code != 0 and "no diffusers-layout name" in told and "lora_te1_" in told
    assert not (tmp_path / "d.safetensors").exists()
    with pytest.raises(
        ValueError, match="lora_te2_encoder_block_0_layer_0_SelfAttention_q.*one text encoder"
    ):
        resolve("lora_te2_encoder_block_0_layer_0_SelfAttention_q", "chroma")


def test_a_qwen_image_text_encoder_key_is_refused_with_the_reason(tmp_path):
    key = "lora_te_model_language_model_layers_0_self_attn_q_proj"
    tensors = {
        "lora_transformer_transformer_blocks_0_attn_to_q.lora_down.weight": torch.ones(2, 64),
        "lora_transformer_transformer_blocks_0_attn_to_q.lora_up.weight": torch.ones(64, 2),
        f"{key}.lora_down.weight": torch.ones(2, 32),
        f"{key}.lora_up.weight": torch.ones(32, 2),
        f"{key}.alpha": torch.tensor(2.0),
    }
    src = tmp_path / "qwen-te.safetensors"
    save_file(tensors, src)
    for call in (
        lambda: convert_file(src, tmp_path / "c.safetensors", "kohya", "qwen-image"),
        lambda: resize_file(src, tmp_path / "r.safetensors", 1, "qwen-image"),
        lambda: merge_files([(src, 1.0), (src, 1.0)], tmp_path / "m.safetensors", "qwen-image"),
    ):
        with pytest.raises(ConfigError, match=rf"{key}.*Qwen2\.5-VL.*takes no|{key}.*no text-encoder LoRA"):
            call()
    assert not list(tmp_path.glob("[crm].safetensors"))


def test_text_encoder_names_resolve_against_the_real_encoders():
    # the save-time ComfyUI check knows CLIP-G's projection under OneTrainer's name, as ComfyUI does
    assert clip_key_map({"text_encoder_2": {"text_projection": (32, 64)}}) == {
        "lora_te2_text_projection": (32, 64)
    }
    assert resolve("lora_te2_encoder_block_23_layer_0_SelfAttention_o", "flux") == (
        "text_encoder_2",
        "encoder.block.23.layer.0.SelfAttention.o",
    )
    assert resolve("lora_te_text_model_encoder_layers_11_mlp_fc1", "sdxl") == (
        "text_encoder",
        "text_model.encoder.layers.11.mlp.fc1",
    )
    assert resolve("text_encoder.encoder.layers.3.self_attn.v_proj", "flux") == (
        "text_encoder",
        "text_model.encoder.layers.3.self_attn.v_proj",
    )
    for name, family in (
        ("lora_te2_text_projection", "flux"),  # T5 has none
        ("lora_te1_text_projection", "sdxl"),  # CLIP-L (CLIPTextModel) has none
        ("lora_te2_encoder_block_07_layer_0_SelfAttention_q", "flux"),  # no ModuleList index
        ("lora_te2_encoder_block_0_layer_2_SelfAttention_q", "flux"),  # T5's layer list is not any index
        ("lora_te3_encoder_block_0_layer_0_SelfAttention_q", "flux"),  # SD3's third encoder
        ("lora_te1_text_model_encoder_layers_0_self_attn_q_proj", "chroma"),
    ):
        with pytest.raises(ValueError, match=name):
            resolve(name, family)
