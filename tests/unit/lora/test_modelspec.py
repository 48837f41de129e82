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
from lorastudio.lora.file_read import read_lora_file
from lorastudio.lora.files import file_for_layout, write_lora_file
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


def test_flux2_klein_4b_and_9b_have_their_own_architecture_ids():
    """klein 4B and 9B load different weights (5 / 8 double-stream blocks): a tool choosing a
    LoRA by architecture must tell them apart (was: both "flux-2-klein"). The ids follow BFL's and
    Comfy-Org's file names (flux-2-klein-4b / -9b); base and step-distilled share the weights'
    layout, so one id each. An unknown size (a tiny test model) keeps the family's id."""
    from lorastudio.families.flux2_klein import SPEC

    layers = {
        v.when["transformer.num_layers"]: v.name for v in SPEC.variants if "transformer.num_layers" in v.when
    }
    ids = {n: architecture("flux2-klein", SimpleNamespace(num_layers=n)) for n in layers}
    assert ids == {5: "flux-2-klein-4b", 8: "flux-2-klein-9b"}, (ids, layers)
    assert all(ids[n].endswith(layers[n].split("-")[1]) for n in layers)  # klein-4b-* -> ...-4b
    assert architecture("flux2-klein", SimpleNamespace(num_layers=1)) == "flux-2-klein"
    assert architecture("flux2-klein", None) == "flux-2-klein"
    given = {**_info("flux2-klein"), "modelspec.architecture": "flux-2-klein-9b"}
    assert modelspec_metadata(given)["modelspec.architecture"] == "flux-2-klein-9b/lora"


def _content_hash(path) -> str:
    """The model spec's hash_sha256, computed here from the file's bytes: sha256 of everything
    after the header (8-byte length + JSON), "0x"-prefixed."""
    import hashlib

    data = path.read_bytes()
    start = 8 + int.from_bytes(data[:8], "little")
    return "0x" + hashlib.sha256(data[start:]).hexdigest()


def test_every_writer_records_the_tensor_content_hash(tmp_path):
    """modelspec.hash_sha256 = sha256 of the tensor data (the file less its header), as the SAI
    model spec defines it, in every file: both layouts, merge, resize, convert; two files of the
    same tensors with other headers share it, other tensors do not."""
    from lorastudio.lora.files import convert_file

    written = []
    for layout in ("diffusers", "kohya"):
        tensors, header = file_for_layout(_lora(0), "flux", layout, _info("flux"))
        written.append(write_lora_file(tmp_path / f"{layout}.safetensors", tensors, header))
    written.append(merge_files([(written[1], 0.5), (written[1], 1.0)], tmp_path / "m.safetensors"))
    resize_file(written[2], tmp_path / "r.safetensors", 1)
    written.append(tmp_path / "r.safetensors")
    convert_file(written[1], tmp_path / "c.safetensors", "diffusers")
    written.append(tmp_path / "c.safetensors")
    hashes = []
    for path in written:
        _, header = read_lora_file(path)
        assert header["modelspec.hash_sha256"] == _content_hash(path), path.name
        hashes.append(header["modelspec.hash_sha256"])
    # the kohya file converted to diffusers holds the diffusers file's tensors: the same hash;
    # the kohya, merged and resized files hold others: other hashes
    assert hashes[4] == hashes[0] and len(set(hashes[:4])) == 4
    tensors, header = file_for_layout(_lora(0), "flux", "kohya", {**_info("flux"), "lorastudio.steps": "9"})
    again = write_lora_file(tmp_path / "again.safetensors", tensors, header)
    assert read_lora_file(again)[1]["modelspec.hash_sha256"] == hashes[1]  # the header is not hashed
