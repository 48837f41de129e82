"""LoRA files of real (tiny) runs: lora_format="kohya" writes the kohya/ComfyUI layout with its
header metadata and ComfyUI key check; plain diffusers `load_lora_weights` loads it and gives
the in-memory adapter's image; `lorastudio lora convert` round-trips files losslessly."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors import safe_open
from typer.testing import CliRunner

from lorastudio import families
from lorastudio.config import TrainConfig
from lorastudio.errors import ConfigError
from lorastudio.generate import apply_loras, generate_image, load_pipeline
from lorastudio.lora import names
from lorastudio.lora.file_read import read_lora_file
from lorastudio.lora.files import convert_file, peft_from_file
from lorastudio.settings import Settings
from lorastudio.training.loop import TrainResult, train

FAMILIES = [
    "sdxl",
    "flux",
    "qwen-image",
    "z-image",
    "flux2",
    "flux2-klein",
    "flux-kontext",
    "chroma",
    "krea2",
]
# diffusers' kohya FLUX loader hard-codes FLUX.1-dev's single-block widths (3072 / 12288), so a
# tiny model's single_blocks linear1 cannot go through it: train the double blocks only there
FLUX_DOUBLE_ONLY = [f"transformer_blocks.0.attn.to_{p}" for p in "qkv"] + [
    "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out", "to_out.0", "ff.net.0.proj", "ff_context.net.2",
]  # fmt: skip
_runs: dict[str, TrainResult] = {}
# the ComfyUI release whose own loader ran on each family's files (bench/comfyui_check.py): Krea 2
# is a ComfyUI model only since after v0.19.3
LOADER_CHECKED = {f: "ComfyUI v0.19.3 (3086026" for f in FAMILIES} | {"krea2": "ComfyUI v0.33.0 (2f35f4a"}


def _extra(family: str) -> dict[str, Any] | None:
    return (
        {"max_sequence_length": 16} if "max_sequence_length" in families.get(family).spec.supports else None
    )


def _size(family: str) -> int:
    return max(32, 2 * families.get(family).spec.resolution_multiple)


def _run(key: str, family: str, tiny_model, sample_dataset: Path, tmp_root: Path, **overrides) -> TrainResult:
    if key not in _runs:
        if families.get(family).spec.edit_model:  # an edit family trains on pairs
            from lorastudio.tiny.paired import make_paired_dataset

            sample_dataset = make_paired_dataset(tmp_root / "paired")
            overrides = {"control_resolution": "target", **overrides}  # tiny controls (the rule: elsewhere)
        raw = {
            "family": family,
            "base_model": str(tiny_model(family)),
            "data_dir": str(sample_dataset),
            "resolution": _size(family),
            "steps": 3,
            "learning_rate": 5e-2,
            "lora_rank": 4,
            "lora_alpha": 8.0,
            "batch_size": 2,
            "output_name": key,
            "seed": 0,
            "trigger_word": "sks",
            "lora_format": "kohya",
            **(_extra(family) or {}),
            **overrides,
        }
        raw = {k: v for k, v in raw.items() if v is not None}  # None: the family's default
        settings = Settings(home=tmp_root / key)
        _runs[key] = train(
            TrainConfig.model_validate(raw), [].append, settings=settings, device="cpu", return_denoiser=True
        )
    return _runs[key]


@pytest.fixture(scope="module")
def tmp_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("lora-runs")


def _image(pipe: Any, family: str) -> np.ndarray:
    size = _size(family)
    img = generate_image(
        pipe,
        family,
        prompt="sks, a red circle",
        seed=0,
        steps=2,
        width=size,
        height=size,
        extra=_extra(family),
    )
    return np.asarray(img, dtype=np.float32)


def _in_memory_and_base(result: TrainResult, family: str, base_model: Path) -> tuple[np.ndarray, np.ndarray]:
    pipe = load_pipeline(str(base_model), family, device="cpu")
    base = _image(pipe, family)
    setattr(pipe, families.get(family).spec.denoiser, result.denoiser)
    return _image(pipe, family), base


@pytest.mark.parametrize("family", FAMILIES)
def test_a_kohya_run_writes_kohya_keys_metadata_and_the_comfyui_check(
    family, tiny_model, sample_dataset, tmp_root
):
    result = _run(f"kohya-{family}", family, tiny_model, sample_dataset, tmp_root)
    sidecar = json.loads(result.lora_path.with_suffix(".json").read_text())
    tensors, header = read_lora_file(result.lora_path)
    prefix = "diffusion_model." if family in names.PEFT_SUFFIXED else "lora_unet_"
    assert tensors and all(k.startswith(prefix) for k in tensors)
    alphas = 0 if family in names.ALPHA_IN_B else len(tensors) // 3  # Krea 2: alpha folded into B
    assert sum(k.endswith(".alpha") for k in tensors) == alphas
    assert sidecar["lora_format"] == "kohya"
    comfy = sidecar["loaders"]["comfyui"]
    assert comfy["ok"] and comfy["unconsumed"] == comfy["mismatched"] == comfy["wrong_strength"] == []
    assert comfy["rules"].startswith("ComfyUI comfy/lora.py@")
    # the kohya layout went through ComfyUI's own loader (bench/comfyui_check.py): v0.19.3, Krea 2 v0.33.0
    assert comfy.get("loader_checked", "").startswith(LOADER_CHECKED[family])
    # diffusers' kohya FLUX.1 reader needs FLUX.1-dev's single-block widths (not the tiny model's);
    # Chroma's and FLUX.1 Kontext's files are in FLUX.1's layout
    assert sidecar["loaders"]["diffusers"]["ok"] is (names.kohya_layout(family) != "flux")
    assert sidecar["loaders"]["a1111_forge"]["checked"] is (family == "sdxl")
    # Krea 2 folds alpha / rank into lora_B: the file's alpha is its rank, as a diffusers file records
    assert header["ss_network_dim"] == "4"
    assert header["ss_network_alpha"] == ("4" if family in names.ALPHA_IN_B else "8")
    assert header["ss_network_module"] == "networks.lora" and header["ss_base_model_version"]
    assert header["ss_steps"] == str(result.steps_run) == header["lorastudio.steps"]
    assert header["lorastudio.family"] == family and header["lorastudio.trigger_word"] == "sks"
    assert header["lorastudio.dataset_fingerprint"] == sidecar["dataset"]["fingerprint"]
    assert header["lorastudio.resolution"] == str(_size(family))
    # the shared file names the base; the sidecar beside it keeps where it is
    assert header["lorastudio.base_model"] == header["ss_sd_model_name"] == Path(sidecar["base_model"]).name
    assert Path(sidecar["base_model"]).is_absolute()
    assert all(isinstance(v, str) for v in header.values())


# the SAI model spec's architecture id of each family's tiny base (FLUX.1's has a guidance embedding: dev)
ARCHITECTURE = {
    "sdxl": "stable-diffusion-xl-v1-base",
    "flux": "flux-1-dev",
    "qwen-image": "qwen-image",
    "z-image": "z-image",
    "flux2": "flux-2-dev",
    "flux2-klein": "flux-2-klein",
    "flux-kontext": "flux-1-kontext-dev",
    "chroma": "chroma",
    "krea2": "krea-2",
}
# whose weight names a kohya-layout file's keys are (its lora_unet_* / diffusion_model.* names)
KOHYA_IMPLEMENTATION = {
    "sdxl": "https://github.com/Stability-AI/generative-models",
    "flux": "https://github.com/black-forest-labs/flux",
    "flux-kontext": "https://github.com/black-forest-labs/flux",
    "chroma": "https://huggingface.co/lodestones/Chroma",
    "qwen-image": "diffusers",
    "z-image": "diffusers",
    "flux2": "https://github.com/comfyanonymous/ComfyUI",
    "flux2-klein": "https://github.com/comfyanonymous/ComfyUI",
    "krea2": "https://github.com/comfyanonymous/ComfyUI",
}


def _content_hash(path: Path) -> str:
    """sha256 of the file's bytes after its header (the SAI model spec's hash_sha256)."""
    data = path.read_bytes()
    return "0x" + hashlib.sha256(data[8 + int.from_bytes(data[:8], "little") :]).hexdigest()


@pytest.mark.parametrize("family", FAMILIES)
def test_each_familys_files_carry_the_sai_model_spec(family, tiny_model, sample_dataset, tmp_root):
    """Both layouts of a run's file carry the modelspec.* keys kohya / SimpleTuner write (as
    strings), next to the lorastudio.* ones; the files load in diffusers (tests above)."""
    for key, layout in ((f"kohya-{family}", "kohya"), (f"default-{family}", None)):
        result = _run(key, family, tiny_model, sample_dataset, tmp_root, lora_format=layout)
        sidecar = json.loads(result.lora_path.with_suffix(".json").read_text())
        _, header = read_lora_file(result.lora_path)
        spec = {k: v for k, v in header.items() if k.startswith("modelspec.")}
        implementation = KOHYA_IMPLEMENTATION[family] if sidecar["lora_format"] == "kohya" else "diffusers"
        size = _size(family)
        assert spec == {
            "modelspec.sai_model_spec": "1.0.0",
            "modelspec.architecture": f"{ARCHITECTURE[family]}/lora",
            "modelspec.implementation": implementation,
            "modelspec.title": key,
            "modelspec.date": sidecar["created_at"],
            "modelspec.resolution": f"{size}x{size}",
            "modelspec.trigger_phrase": "sks",
            "modelspec.hash_sha256": _content_hash(result.lora_path),  # the tensors' (lora/content_hash.py)
        }, (key, sidecar["lora_format"])
        assert header["lorastudio.output_name"] == key and all(isinstance(v, str) for v in header.values())


def test_a_diffusers_run_records_its_facts_in_the_header(tiny_model, sample_dataset, tmp_root):
    result = _run("diffusers-flux", "flux", tiny_model, sample_dataset, tmp_root, lora_format="diffusers")
    tensors, header = read_lora_file(result.lora_path)
    assert all(k.startswith("transformer.") for k in tensors) and "lora_adapter_metadata" in header
    assert header["lorastudio.rank"] == "4" and header["lorastudio.lora_format"] == "diffusers"
    assert not any(k.startswith("ss_") for k in header)
    sidecar = json.loads(result.lora_path.with_suffix(".json").read_text())
    assert sidecar["loaders"]["comfyui"]["ok"] and sidecar["loaders"]["diffusers"]["ok"]


def test_comfyui_maps_a_krea2_file_in_the_diffusers_layout_too(tiny_model, sample_dataset, tmp_root):
    """ComfyUI's Krea 2 support (v0.33.0's lora.py: krea2_to_diffusers) maps its diffusers names
    (transformer.<name>) as well as its original ones: the save-time check passes a diffusers-layout
    Krea 2 file, as ComfyUI's own loader did (bench/comfyui_check.py --lora-format diffusers krea2)."""
    result = _run("diffusers-krea2", "krea2", tiny_model, sample_dataset, tmp_root, lora_format="diffusers")
    tensors, _ = read_lora_file(result.lora_path)
    assert tensors and all(k.startswith("transformer.") for k in tensors)
    comfy = json.loads(result.lora_path.with_suffix(".json").read_text())["loaders"]["comfyui"]
    assert comfy["ok"] and comfy["unconsumed"] == comfy["mismatched"] == comfy["wrong_strength"] == [], comfy
    assert comfy["loader_checked"].startswith("ComfyUI v0.33.0 (2f35f4a")


@pytest.mark.parametrize("family", FAMILIES)
def test_each_familys_default_file_loads_everywhere_at_the_trained_strength(
    family, tiny_model, sample_dataset, tmp_root
):
    """The file a run writes when lora_format is not set (the family's portable default: kohya
    for SDXL, FLUX.2 and Krea 2, diffusers for the others; alpha 8 != rank 4): the save-time check passes it for ComfyUI and diffusers, and
    plain diffusers `load_lora_weights` gives the in-memory adapter's image."""
    result = _run(f"default-{family}", family, tiny_model, sample_dataset, tmp_root, lora_format=None)
    sidecar = json.loads(result.lora_path.with_suffix(".json").read_text())
    assert sidecar["lora_format"] == families.get(family).spec.defaults.get("lora_format", "diffusers")
    assert sidecar["loaders"]["comfyui"]["ok"] and sidecar["loaders"]["diffusers"]["ok"], sidecar["loaders"]
    # the default layouts went through ComfyUI's own loader (bench/comfyui_check.py): v0.19.3, Krea 2 v0.33.0
    checked = sidecar["loaders"]["comfyui"].get("loader_checked", "")
    assert checked.startswith(LOADER_CHECKED[family]), checked
    assert sidecar["loaders"]["a1111_forge"]["checked"] is (family == "sdxl")
    assert sidecar["loaders"]["a1111_forge"].get("ok", True) is True
    in_memory, base = _in_memory_and_base(result, family, tiny_model(family))
    fresh = load_pipeline(str(tiny_model(family)), family, device="cpu")
    fresh.load_lora_weights(str(result.lora_path))
    assert np.abs(in_memory - base).mean() > 0.5  # the LoRA visibly changes the image
    assert np.abs(_image(fresh, family) - in_memory).max() <= 1.0


@pytest.mark.parametrize("family", FAMILIES)
def test_diffusers_loads_the_kohya_file_and_gives_the_in_memory_image(
    family, tiny_model, sample_dataset, tmp_root
):
    targets = {"lora_targets": FLUX_DOUBLE_ONLY} if names.kohya_layout(family) == "flux" else {}
    result = _run(f"load-{family}", family, tiny_model, sample_dataset, tmp_root, **targets)
    in_memory, base = _in_memory_and_base(result, family, tiny_model(family))
    fresh = load_pipeline(str(tiny_model(family)), family, device="cpu")
    fresh.load_lora_weights(str(result.lora_path))  # plain diffusers, kohya keys
    from_file = _image(fresh, family)
    assert np.abs(in_memory - base).mean() > 0.5  # the LoRA visibly changes the image
    assert np.abs(from_file - in_memory).max() <= 1.0


def _deltas(path: Path, family: str) -> dict[str, torch.Tensor]:
    """{module: (alpha / rank) * B @ A}: the weight change every loader applies for the file."""
    tensors, header = read_lora_file(path)
    lora = peft_from_file(tensors, header, family)
    modules = {k.rsplit(".lora_", 1)[0] for k in lora.tensors}
    return {
        m: lora.alpha
        / lora.rank
        * (lora.tensors[f"{m}.lora_B.weight"].flatten(1) @ lora.tensors[f"{m}.lora_A.weight"].flatten(1))
        for m in modules
    }


@pytest.mark.parametrize("family", FAMILIES)
def test_convert_round_trip_is_lossless_and_both_files_give_the_in_memory_image(
    family, tiny_model, sample_dataset, tmp_root, tmp_path
):
    result = _run(f"kohya-{family}", family, tiny_model, sample_dataset, tmp_root)
    as_diffusers, as_kohya = tmp_path / "d.safetensors", tmp_path / "k.safetensors"
    runner = CliRunner()
    from lorastudio.cli.app import _register, app

    _register()
    out = runner.invoke(
        app, ["lora", "convert", str(result.lora_path), str(as_diffusers), "--to", "diffusers"]
    )
    assert out.exit_code == 0, out.output
    assert convert_file(as_diffusers, as_kohya, "kohya") == "diffusers"
    original, header = read_lora_file(result.lora_path)
    again, header_again = read_lora_file(as_kohya)
    assert original.keys() == again.keys()  # same names; the diffusers file folded alpha/rank into B
    before, after = _deltas(result.lora_path, family), _deltas(as_kohya, family)
    assert before.keys() == after.keys() == _deltas(as_diffusers, family).keys()
    for m in before:
        torch.testing.assert_close(after[m], before[m], rtol=1e-6, atol=1e-7)
    # alpha = rank after the fold, which changed lora_B's values: their hash too
    changed = {"lorastudio.lora_format", "ss_network_alpha", "modelspec.hash_sha256"}
    assert {k: v for k, v in header.items() if k not in changed} == {
        k: v for k, v in header_again.items() if k not in changed
    }
    in_memory, _ = _in_memory_and_base(result, family, tiny_model(family))
    fresh = load_pipeline(str(tiny_model(family)), family, device="cpu")
    apply_loras(fresh, [(as_diffusers, 1.0)])  # the converted file, through diffusers' own loader
    assert np.abs(_image(fresh, family) - in_memory).max() <= 1.0


def test_convert_refuses_bad_requests_and_leaves_no_file(tiny_model, sample_dataset, tmp_root, tmp_path):
    result = _run("kohya-qwen-image", "qwen-image", tiny_model, sample_dataset, tmp_root)
    taken = tmp_path / "taken.safetensors"
    taken.write_bytes(b"x")
    with pytest.raises(ConfigError, match="already exists"):
        convert_file(result.lora_path, taken, "diffusers")
    with pytest.raises(ConfigError, match="diffusers or kohya"):
        convert_file(result.lora_path, tmp_path / "a.safetensors", "comfy")  # type: ignore[arg-type]
    from lorastudio.errors import ModelSourceError

    with pytest.raises(ModelSourceError, match="is not a sdxl LoRA: it is a qwen-image one"):
        convert_file(result.lora_path, tmp_path / "b.safetensors", "diffusers", family="sdxl")
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"not a safetensors file")

    with pytest.raises(ModelSourceError):
        convert_file(garbage, tmp_path / "c.safetensors", "kohya", family="flux")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["garbage.safetensors", "taken.safetensors"]
    assert taken.read_bytes() == b"x"
    with safe_open(str(result.lora_path), framework="pt") as f:
        assert f.metadata()["lorastudio.family"] == "qwen-image"
