"""A diffusers-layout file whose adapter config sets use_rslora (peft's rank-stabilized LoRA,
which another trainer on peft writes): peft, so diffusers' load_lora_weights, scales each layer
by alpha / sqrt(r), not alpha / r. convert / merge / resize (peft_from_file), a run's init_lora and
its text-encoder layers (folded_peft) and the ComfyUI check (diffusers_scale) read it so."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from lorastudio.errors import ModelSourceError
from lorastudio.lora.convert import PeftLora
from lorastudio.lora.file_read import read_lora_file
from lorastudio.lora.files import file_for_layout, peft_from_file
from lorastudio.lora.header import check_lora_structure, read_header
from lorastudio.lora.ops import merge_files
from lorastudio.lora.portability import diffusers_scale
from lorastudio.lora.text_encoders import folded_peft

MODULES = ("transformer_blocks.0.attn.to_q", "single_transformer_blocks.0.proj_out")
R, ALPHA = 4, 8.0  # rslora scale 8 / sqrt(4) = 4 (alpha / r would be 2)


def _rslora_file(path: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    peft = {}
    for m in MODULES:
        peft[f"{m}.lora_A.weight"] = torch.randn(R, 16, generator=gen)  # (r, in)
        peft[f"{m}.lora_B.weight"] = torch.randn(16, R, generator=gen)  # (out, r)
    tensors, header = file_for_layout(
        PeftLora(peft, R, float(R)), "flux", "diffusers", {"lorastudio.family": "flux"}
    )
    config = json.loads(header["lora_adapter_metadata"])
    config.update({"transformer.lora_alpha": ALPHA, "transformer.use_rslora": True})
    save_file(tensors, str(path), {**header, "lora_adapter_metadata": json.dumps(config)})
    return path, peft


def _delta(tensors: dict[str, torch.Tensor], scale: float, module: str) -> torch.Tensor:
    return scale * tensors[f"{module}.lora_B.weight"] @ tensors[f"{module}.lora_A.weight"]  # (out, in)


def test_an_rslora_files_layers_keep_peft_s_alpha_over_sqrt_r(tmp_path: Path) -> None:
    path, peft = _rslora_file(tmp_path / "rs.safetensors")
    tensors, header = read_lora_file(path)
    scale = ALPHA / math.sqrt(R)  # peft LoraLayer.update_layer with use_rslora
    lora = peft_from_file(tensors, header, "flux")
    for m in MODULES:
        torch.testing.assert_close(_delta(lora.tensors, lora.alpha / lora.rank, m), _delta(peft, scale, m))
    assert diffusers_scale(header, "flux") == scale
    merged_path = merge_files([(path, 0.5), (path, 0.5)], tmp_path / "merged.safetensors")
    merged_tensors, merged_header = read_lora_file(merged_path)
    merged = peft_from_file(merged_tensors, merged_header, "flux")
    assert json.loads(merged_header["lora_adapter_metadata"])["transformer.use_rslora"] is False  # folded
    for m in MODULES:
        torch.testing.assert_close(
            _delta(merged.tensors, merged.alpha / merged.rank, m), _delta(peft, scale, m)
        )


def test_an_rslora_text_encoder_config_folds_alpha_over_sqrt_r() -> None:
    gen = torch.Generator().manual_seed(1)
    module = "text_model.encoder.layers.0.self_attn.q_proj"
    a, b = torch.randn(R, 8, generator=gen), torch.randn(8, R, generator=gen)  # (r, in), (out, r)
    tensors = {f"text_encoder.{module}.lora_A.weight": a, f"text_encoder.{module}.lora_B.weight": b}
    config = {"text_encoder.r": R, "text_encoder.lora_alpha": ALPHA, "text_encoder.use_rslora": True}
    out = folded_peft(tensors, {"lora_adapter_metadata": json.dumps(config)}, "flux")
    (b_key,) = [k for k in out if "lora_B" in k or "lora_up" in k]
    torch.testing.assert_close(out[b_key], b * (ALPHA / math.sqrt(R)))


def test_a_use_dora_config_without_magnitudes_is_refused_by_the_header_check(tmp_path: Path) -> None:
    """diffusers would load it as a DoRA with magnitudes taken from the base weights, while
    convert / merge / resize read it as the plain LoRA its tensors are: every reader refuses it;
    with its layers' lora_magnitude_vector (a DoRA file as peft saves one) it passes."""
    path, _ = _rslora_file(tmp_path / "rs.safetensors")
    tensors, header = read_lora_file(path)
    config = json.loads(header["lora_adapter_metadata"])
    config.update({"transformer.use_rslora": False, "transformer.use_dora": True})
    bare = tmp_path / "bare.safetensors"
    save_file(tensors, str(bare), {**header, "lora_adapter_metadata": json.dumps(config)})
    with pytest.raises(ModelSourceError, match="use_dora' but the file holds no lora_magnitude_vector"):
        check_lora_structure(read_header(bare))
    with pytest.raises(ModelSourceError, match="lora_magnitude_vector"):
        merge_files([(bare, 0.5), (bare, 0.5)], tmp_path / "merged.safetensors")
    magnitudes = {f"transformer.{m}.lora_magnitude_vector": torch.ones(16) for m in MODULES}  # [out]
    dora = tmp_path / "dora.safetensors"
    save_file({**tensors, **magnitudes}, str(dora), {**header, "lora_adapter_metadata": json.dumps(config)})
    check_lora_structure(read_header(dora))
