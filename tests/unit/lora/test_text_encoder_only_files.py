"""A LoRA file of text-encoder layers alone (no denoiser part: kohya's / OneTrainer's
`lora_te1_` / `lora_te2_` keys, or diffusers' `text_encoder.` / `text_encoder_2.`) in `lora
convert`, merge and resize: taken where the family is given (--family or the file's header),
each layer's change kept; without a family, refused saying how to give it; for a family whose
encoder takes none, refused with that reason.

Before: every one was refused as "not a diffusers or kohya LoRA of a denoiser (e.g.
'lora_te1_...')", which it is not meant to be."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file
from tests.unit.lora.te_files import flux_files, sdxl_files
from tests.unit.lora.test_ops import _cli
from tests.unit.lora.test_text_encoder_foreign_files import _changes, _same, _want

from lorastudio.errors import ConfigError
from lorastudio.generate import load_pipeline
from lorastudio.lora.files import convert_file
from lorastudio.lora.ops import merge_files, resize_file


def _encoders_only(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in tensors.items() if k.startswith(("lora_te", "text_encoder"))}


@pytest.mark.parametrize("family", ["sdxl", "flux"])
def test_a_text_encoder_only_file_converts_merges_and_resizes_with_its_family_given(
    family, tiny_model, tmp_path
):
    pipe = load_pipeline(str(tiny_model(family)), family, device="cpu")
    theirs = _encoders_only(sdxl_files(pipe)[0] if family == "sdxl" else flux_files(pipe)[0])
    src = tmp_path / "te.safetensors"
    save_file(theirs, src)
    want = _want(theirs)
    result = _cli("convert", str(src), str(tmp_path / "k.safetensors"), "--to", "kohya", "--family", family)
    assert result.exit_code == 0, result.output + str(result.exception)
    kohya = tmp_path / "k.safetensors"
    assert all(k.startswith(("lora_te1_", "lora_te2_")) for k in load_file(str(kohya)))
    _same(_changes(kohya, family), want, family)  # every layer, at its change
    if family == "sdxl":  # the diffusers layout and back
        diffusers = tmp_path / "d.safetensors"
        convert_file(src, diffusers, "diffusers", family)
        assert all(k.startswith(("text_encoder.", "text_encoder_2.")) for k in load_file(str(diffusers)))
        _same(_changes(diffusers, family), want, family)
        convert_file(diffusers, tmp_path / "dk.safetensors", "kohya")  # its header names the family now
        _same(_changes(tmp_path / "dk.safetensors", family), want, family)
    merged = merge_files([(src, 0.25), (kohya, 0.75)], tmp_path / "m.safetensors", family)
    _same(_changes(merged, family), want, family)
    resize_file(src, tmp_path / "r.safetensors", 1, family)
    best = {}
    for name, delta in want.items():
        u, s, vh = torch.linalg.svd(delta.double(), full_matrices=False)
        best[name] = (s[0] * torch.outer(u[:, 0], vh[0])).float()  # [out, in]
    _same(_changes(tmp_path / "r.safetensors", family), best, family)


def test_a_text_encoder_only_file_without_a_family_is_refused_saying_how_to_give_it(tiny_model, tmp_path):
    pipe = load_pipeline(str(tiny_model("sdxl")), "sdxl", device="cpu")
    src = tmp_path / "te.safetensors"
    save_file(_encoders_only(sdxl_files(pipe)[0]), src)
    for args in (
        ("convert", str(src), str(tmp_path / "c.safetensors"), "--to", "kohya"),
        ("resize", str(src), "--rank", "1", "--out", str(tmp_path / "r.safetensors")),
        ("merge", f"{src}:0.5", f"{src}:0.5", "--out", str(tmp_path / "m.safetensors")),
    ):
        result = _cli(*args)
        told = result.output + str(result.exception)
        assert result.exit_code != 0 and "does not name its family: pass --family" in told, told
        assert "LoRA of a denoiser" not in told
    assert not list(tmp_path.glob("[crm].safetensors"))


def test_a_text_encoder_only_file_of_a_family_that_takes_none_is_refused_with_the_reason(tmp_path):
    key = "lora_te_model_language_model_layers_0_self_attn_q_proj"
    src = tmp_path / "qwen-te.safetensors"
    save_file(
        {
            f"{key}.lora_down.weight": torch.ones(2, 16),
            f"{key}.lora_up.weight": torch.ones(16, 2),
            f"{key}.alpha": torch.tensor(2.0),
        },
        src,
    )
    for call in (
        lambda: convert_file(src, tmp_path / "c.safetensors", "kohya", "qwen-image"),
        lambda: resize_file(src, tmp_path / "r.safetensors", 1, "qwen-image"),
        lambda: merge_files([(src, 1.0), (src, 1.0)], tmp_path / "m.safetensors", "qwen-image"),
    ):
        with pytest.raises(ConfigError, match=rf"{key}.*Qwen2\.5-VL.*takes no|{key}.*no text-encoder LoRA"):
            call()
    assert not list(tmp_path.glob("[crm].safetensors"))


def test_a_file_of_neither_part_still_says_what_it_is_not(tmp_path):
    src = tmp_path / "odd.safetensors"
    save_file({"something_else.weight": torch.ones(2, 2)}, src)
    result = _cli("convert", str(src), str(tmp_path / "c.safetensors"), "--to", "kohya", "--family", "sdxl")
    assert result.exit_code != 0 and "not a diffusers or kohya LoRA" in result.output + str(result.exception)
