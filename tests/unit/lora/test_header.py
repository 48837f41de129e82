"""LoRA headers are read with a size cap and checked before any tensor is loaded (lora/header.py):
every hostile case is refused with the reason; well-formed files (ours, diffusers', kohya's) pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from hostile_loras import flux_lora_bytes, hostile_cases
from lorastudio.errors import ModelSourceError, NotFound
from lorastudio.lora.file_read import read_lora_file
from lorastudio.lora.header import check_lora_file, read_header

CASES = hostile_cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_lora_is_refused_with_the_reason(case: str, tmp_path: Path) -> None:
    data, reason = CASES[case]
    path = tmp_path / f"{case}.safetensors"
    path.write_bytes(data)
    with pytest.raises(ModelSourceError) as info:
        check_lora_file(path, "flux")
    assert reason in str(info.value) and str(path) in str(info.value)


def test_a_huge_header_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A header length over the cap is refused from the first 8 bytes: nothing more is read."""
    path = tmp_path / "big.safetensors"
    body = json.dumps({"__metadata__": {"x": "y" * 200_000}}).encode()
    path.write_bytes(len(body).to_bytes(8, "little") + body)
    with pytest.raises(ModelSourceError, match="larger than the 100000 allowed"):
        read_header(path, max_bytes=100_000)
    assert read_header(path, max_bytes=300_000).metadata == {"x": "y" * 200_000}


def test_well_formed_loras_pass(tmp_path: Path) -> None:
    ours = tmp_path / "ours.safetensors"
    ours.write_bytes(flux_lora_bytes(metadata={"lorastudio.family": "flux", "ss_network_dim": "2"}))
    header = check_lora_file(ours, "flux")
    assert header.tensors["transformer.single_transformer_blocks.0.attn.to_q.lora_A.weight"].shape == (2, 4)
    # written by safetensors itself (alignment padding, a scalar alpha, kohya names, bf16)
    kohya = tmp_path / "kohya.safetensors"
    save_file(
        {
            "lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight": torch.zeros(
                4, 8, dtype=torch.bfloat16
            ),
            "lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight": torch.zeros(24, 4, dtype=torch.bfloat16),
            "lora_unet_double_blocks_0_img_attn_qkv.alpha": torch.tensor(4.0),
        },
        str(kohya),
        metadata={"ss_base_model_version": "flux1", "ss_network_dim": "4"},
    )
    check_lora_file(kohya, "flux")
    with pytest.raises(
        ModelSourceError,
        match="not a sdxl LoRA: it is a flux one \\(its header says ss_base_model_version='flux1'",
    ):
        check_lora_file(kohya, "sdxl")
    keys_only = tmp_path / "keys.safetensors"  # no header: only its BFL block names say what it is
    save_file(load_file(str(kohya)), str(keys_only))
    for family in ("flux", "chroma", "flux2", "flux2-klein"):  # FLUX.1's block names are theirs too
        check_lora_file(keys_only, family)
    with pytest.raises(
        ModelSourceError, match="not a sdxl LoRA: it is a flux one \\(it has layers such as 'lora_unet_double"
    ):
        check_lora_file(keys_only, "sdxl")
    flux2 = tmp_path / "flux2.safetensors"  # a header naming FLUX.2 is not taken for FLUX.1's
    save_file(load_file(str(kohya)), str(flux2), metadata={"ss_base_model_version": "flux2"})
    check_lora_file(flux2, "flux2")
    with pytest.raises(
        ModelSourceError,
        match="not a flux LoRA: it is a flux2 one \\(its header says ss_base_model_version='flux2'",
    ):
        check_lora_file(flux2, "flux")
    zimage = tmp_path / "z.safetensors"
    zimage.write_bytes(flux_lora_bytes(key="diffusion_model.layers.0.attention.to_q"))
    check_lora_file(zimage, "z-image")
    with pytest.raises(
        ModelSourceError,
        match="not a flux LoRA: it is a z-image one .it has layers such as 'diffusion_model.layers.0",
    ):
        check_lora_file(zimage, "flux")
    with pytest.raises(NotFound):
        check_lora_file(tmp_path / "missing.safetensors", "flux")


def test_read_lora_file_checks_the_header_first(tmp_path: Path) -> None:
    path = tmp_path / "bad.safetensors"
    path.write_bytes(CASES["metadata_not_string"][0])
    with pytest.raises(ModelSourceError, match="is a int, not a string"):
        read_lora_file(path)


@pytest.mark.parametrize(
    "metadata",
    [
        {"lorastudio.family": "x" * 1_000_000},
        {"ss_base_model_version": "sd_v1" + "y" * 1_000_000},
        {"lorastudio.family": "sdxl\x1b[2J" + "z" * 100},
    ],
)
def test_a_header_value_of_a_megabyte_is_quoted_bounded(tmp_path: Path, metadata: dict) -> None:
    """The family refusal quoted the header's value whole: a 1 MB `lorastudio.family` made a
    2 MB message (the API's 400, the CLI's line), and `lora convert` / `merge` said "unknown
    family '<1 MB>'". Each quotes its first 60 characters and the length."""
    from lorastudio.errors import ConfigError
    from lorastudio.lora.files import convert_file
    from lorastudio.lora.ops import merge_files

    path = tmp_path / "big.safetensors"
    path.write_bytes(flux_lora_bytes(metadata=metadata))
    with pytest.raises(ModelSourceError) as info:
        check_lora_file(path, "flux")
    assert len(str(info.value)) < 400 and "characters)" in str(info.value) and "\x1b" not in str(info.value)
    if "lorastudio.family" in metadata:  # the family the header names: unknown
        for run in (
            lambda: convert_file(path, tmp_path / "out.safetensors", to="kohya"),
            lambda: merge_files([(path, 1.0), (path, 1.0)], tmp_path / "out.safetensors"),
        ):
            with pytest.raises(ConfigError) as refused:
                run()
            assert len(str(refused.value)) < 400 and "unknown family" in str(refused.value)


# (the peer's ss_base_model_version, the families it fits, one that it does not)
PEER_VERSIONS = [
    ("flux_2_dev", ("flux2",), "flux"),  # musubi-tuner's architecture names
    ("flux_2_klein_4b", ("flux2-klein",), "flux"),
    ("flux_2_klein_9b", ("flux2-klein",), "flux2"),
    ("flux_kontext", ("flux-kontext", "flux"), "flux2"),
    ("qwen_image_edit", ("qwen-image-edit",), "qwen-image"),
    ("z_image", ("z-image",), "flux"),
    ("flux.1_kontext", ("flux-kontext", "flux"), "chroma"),  # ai-toolkit's
    ("flux.1", ("flux", "flux-kontext"), "flux2"),
    ("qwen_image", ("qwen-image", "qwen-image-edit"), "flux"),  # its Qwen-Image-Edit files too
    ("flux2_klein_4b", ("flux2-klein",), "flux2"),
    ("zimage", ("z-image",), "qwen-image"),
    ("flux1", ("flux", "flux-kontext"), "flux2"),  # sd-scripts' (and lorastudio's Kontext files)
]


@pytest.mark.parametrize(("version", "fits", "other"), PEER_VERSIONS)
def test_a_peers_base_model_version_names_its_family(version, fits, other, tmp_path: Path) -> None:
    """musubi-tuner's `flux_2_dev` / `flux_2_klein_4b` / `flux_kontext` and ai-toolkit's
    `flux.1_kontext` / `qwen_image` (its Qwen-Image-Edit files) were read as FLUX.1 / Qwen-Image by
    the "flux" / "qwen_image" prefix: each peer's own family refused the file ("it is a flux one"),
    and FLUX.1 took FLUX.2's (RELIABILITY 2242). The header is all that differs here."""
    path = tmp_path / "peer.safetensors"
    path.write_bytes(flux_lora_bytes(metadata={"ss_base_model_version": version}))
    for family in fits:
        check_lora_file(path, family)
    with pytest.raises(ModelSourceError, match=f"not a {other} LoRA: it is a .* one \\(its header says"):
        check_lora_file(path, other)
