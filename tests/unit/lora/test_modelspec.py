"""The SAI model spec's `modelspec.*` header keys (lora/metadata.py): every family has an
architecture id, the adapter kind and the file's layout decide the suffix and the
implementation, FLUX.1 schnell is told from its denoiser's config, and a file made from another
keeps its source's architecture."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from lorastudio import families
from lorastudio.lora.convert import PeftLora
from lorastudio.lora.files import file_for_layout, read_lora_file, write_lora_file
from lorastudio.lora.metadata import ARCHITECTURES, architecture, modelspec_metadata
from lorastudio.lora.ops import merge_files, resize_file


def _info(family: str, **facts: str) -> dict[str, str]:
    base = {"family": family, "output_name": "my-lora", "created_at": "2026-12-05T09:00:00+00:00"}
    return {f"lorastudio.{k}": v for k, v in {**base, **facts}.items()}


@pytest.mark.parametrize("family", families.names())
def test_every_family_has_its_own_architecture_id(family):
    spec = modelspec_metadata(_info(family))
    arch = spec["modelspec.architecture"]
    assert family in ARCHITECTURES and arch == f"{ARCHITECTURES[family]}/lora"  # a new family needs its id
    others = {modelspec_metadata(_info(f))["modelspec.architecture"] for f in families.names() if f != family}
    assert arch not in others  # each family's LoRAs told apart
    assert all(isinstance(v, str) and v for v in spec.values())


def test_the_layout_decides_the_suffix_and_implementation():
    diffusers = modelspec_metadata(_info("flux", lora_format="diffusers"))
    kohya = modelspec_metadata(_info("flux", lora_format="kohya"))
    lycoris = modelspec_metadata(_info("flux", lora_format="lycoris"))
    assert diffusers["modelspec.architecture"] == kohya["modelspec.architecture"] == "flux-1-dev/lora"
    assert lycoris["modelspec.architecture"] == "flux-1-dev/lycoris"
    assert diffusers["modelspec.implementation"] == "diffusers"
    assert kohya["modelspec.implementation"] == "https://github.com/black-forest-labs/flux"
    sdxl = modelspec_metadata(_info("sdxl", lora_format="kohya"))
    assert sdxl["modelspec.implementation"] == "https://github.com/Stability-AI/generative-models"


def test_flux_schnell_is_told_from_the_guidance_embedding():
    assert architecture("flux", SimpleNamespace(guidance_embeds=False)) == "flux-1-schnell"
    assert architecture("flux", SimpleNamespace(guidance_embeds=True)) == "flux-1-dev"
    assert architecture("flux", None) == "flux-1-dev"
    given = {**_info("flux"), "modelspec.architecture": "flux-1-schnell"}
    assert modelspec_metadata(given)["modelspec.architecture"] == "flux-1-schnell/lora"


def test_facts_become_the_specs_strings():
    spec = modelspec_metadata(
        _info(
            "sdxl",
            resolution="[512, 1024]",
            trigger_word="sks",
            v_prediction="True",
            merged_from='[["a.safetensors", 0.5], ["b.safetensors", 1.0]]',
        )
    )
    assert spec["modelspec.resolution"] == "1024x1024"  # the largest of several
    assert spec["modelspec.trigger_phrase"] == "sks"
    assert spec["modelspec.prediction_type"] == "v"
    assert spec["modelspec.merged_from"] == "a.safetensors, b.safetensors"
    assert spec["modelspec.title"] == "my-lora" and spec["modelspec.date"] == "2026-12-05T09:00:00+00:00"
    assert modelspec_metadata(_info("sdxl", v_prediction="False"))["modelspec.prediction_type"] == "epsilon"
    unknown = modelspec_metadata(_info("sdxl"))  # the base's scheduler decided: not known here
    assert "modelspec.prediction_type" not in unknown and "modelspec.trigger_phrase" not in unknown
    assert "modelspec.prediction_type" not in modelspec_metadata(_info("flux", v_prediction="False"))


def _lora(seed: int) -> PeftLora:
    g = torch.Generator().manual_seed(seed)
    m = "transformer_blocks.0.attn.to_q"
    return PeftLora(
        {
            f"{m}.lora_A.weight": torch.randn(2, 8, generator=g),
            f"{m}.lora_B.weight": torch.randn(8, 2, generator=g),
        },
        2,
        2.0,
    )


def test_merged_and_resized_files_keep_their_sources_architecture(tmp_path):
    info = {**_info("flux"), "modelspec.architecture": "flux-1-schnell"}
    paths = []
    for i in range(2):
        tensors, header = file_for_layout(_lora(i), "flux", "kohya", info)
        paths.append(write_lora_file(tmp_path / f"{i}.safetensors", tensors, header))
    _, header = read_lora_file(paths[0])
    assert header["modelspec.architecture"] == "flux-1-schnell/lora"
    merged = merge_files([(paths[0], 0.5), (paths[1], 1.0)], tmp_path / "m.safetensors")
    _, header = read_lora_file(merged)
    assert header["modelspec.architecture"] == "flux-1-schnell/lora"
    assert header["modelspec.merged_from"] == "0.safetensors, 1.safetensors"
    resize_file(merged, tmp_path / "r.safetensors", 1)
    _, header = read_lora_file(tmp_path / "r.safetensors")
    assert header["modelspec.architecture"] == "flux-1-schnell/lora"
    assert json.loads(header["lorastudio.merged_from"])[0][0] == "0.safetensors"
