"""A diffusers-layout file's adapter config (lora/adapter_config.py) without importing peft: the
header and tensors that peft's LoraConfig gave, and `lora merge` / `lora resize` of a diffusers
file with no peft to import."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from lorastudio.lora.adapter_config import KNOWN, installed_peft, lora_config_dict
from lorastudio.lora.convert import PeftLora, peft_modules
from lorastudio.lora.file_read import read_lora_file
from lorastudio.lora.files import diffusers_file, file_for_layout, write_lora_file
from lorastudio.lora.ops import merge_files, resize_file

MODULES = (
    "transformer_blocks.0.attn.to_q",
    "transformer_blocks.0.attn.to_k",
    "single_transformer_blocks.0.proj_out",
)
KNOWN_HERE = pytest.mark.skipif(
    installed_peft() not in KNOWN,
    reason=f"peft {installed_peft()}'s LoraConfig dict is not in lora/adapter_config.KNOWN: add"
    " LoraConfig().to_dict() of it there (peft is then imported for each diffusers file written)",
)


def _lora(ranks: tuple[int, ...] = (4, 4, 4), alpha: float = 3.0) -> PeftLora:
    gen = torch.Generator().manual_seed(0)
    tensors = {}
    for module, r in zip(MODULES, ranks, strict=True):
        tensors[f"{module}.lora_A.weight"] = torch.randn(r, 16, generator=gen)  # (r, in)
        tensors[f"{module}.lora_B.weight"] = torch.randn(16, r, generator=gen)  # (out, r)
    return PeftLora(tensors, ranks[0], alpha)


def _peft_header(lora: PeftLora) -> dict[str, str]:
    """The header the code before lora/adapter_config.py wrote (peft's LoraConfig)."""
    from peft import LoraConfig

    modules = peft_modules(lora.tensors)
    ranks = {m: int(a.shape[0]) for m, (a, _) in modules.items() if a.shape[0] != lora.rank}
    meta = LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        target_modules=sorted(modules),
        rank_pattern=ranks,
        alpha_pattern={m: r * lora.alpha / lora.rank for m, r in ranks.items()},
    ).to_dict()
    meta["target_modules"] = sorted(meta["target_modules"])
    packed = {f"transformer.{k}": v for k, v in meta.items()}
    return {"format": "pt", "lora_adapter_metadata": json.dumps(packed, indent=2, sort_keys=True)}


@KNOWN_HERE
@pytest.mark.parametrize("ranks", [(4, 4, 4), (4, 2, 4)], ids=["one-rank", "rank-pattern"])
def test_the_header_and_tensors_are_peft_loraconfigs(ranks: tuple[int, ...]) -> None:
    lora = _lora(ranks)
    tensors, header = diffusers_file(lora, "flux")
    assert header == _peft_header(lora)
    assert tensors.keys() == {f"transformer.{k}" for k in lora.tensors}
    assert all(torch.equal(tensors[f"transformer.{k}"], v) for k, v in lora.tensors.items())
    assert lora_config_dict(4, 3.0, ["b", "a"], {}, {})["target_modules"] == ["a", "b"]


@KNOWN_HERE
def test_merge_and_resize_of_a_diffusers_file_import_no_peft(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "a.safetensors"
    tensors, header = file_for_layout(_lora(), "flux", "diffusers", {"lorastudio.family": "flux"})
    write_lora_file(src, tensors, header)
    monkeypatch.setitem(sys.modules, "peft", None)  # `import peft` raises ImportError from here on
    merged = merge_files([(src, 0.5), (src, 0.5)], tmp_path / "merged.safetensors")
    resize_file(src, tmp_path / "resized.safetensors", 2)
    monkeypatch.delitem(sys.modules, "peft")
    for path in (merged, tmp_path / "resized.safetensors"):
        out, meta = read_lora_file(path)
        lora = PeftLora(
            {k.removeprefix("transformer."): v for k, v in out.items()}, int(meta["lorastudio.rank"]), 0
        )
        want = json.loads(
            _peft_header(PeftLora(lora.tensors, lora.rank, float(lora.rank)))["lora_adapter_metadata"]
        )
        assert json.loads(meta["lora_adapter_metadata"]) == want
