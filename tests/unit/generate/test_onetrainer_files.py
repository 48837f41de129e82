"""OneTrainer's Qwen-Image and Z-Image LoRA files (`lora_transformer_<diffusers name, "_" for
".">` with lora_down / lora_up / `.alpha`: its LoRAModuleWrapper's keys, which its Qwen-Image
saver writes unconverted) made from our own trained tiny LoRA by renaming: `lorastudio lora
convert` turns them into the diffusers and the kohya / ComfyUI layout, and generation renders
each as the original at strength 1 and at half the change at 0.5.

Before: convert refused them naming a key ("not a qwen-image kohya/ComfyUI key") and generation
refused them (diffusers' loaders take them for unknown modules)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from tests.unit.lora.test_ops import _cli

from lorastudio.config import parse_train_config
from lorastudio.generate import apply_loras, generate_image, load_pipeline
from lorastudio.lora.file_read import read_lora_file
from lorastudio.lora.files import peft_from_file
from lorastudio.settings import Settings
from lorastudio.training.loop import train

PROMPT = "a red circle on a blue background"


def _trained(family: str, tiny_model, dataset: Path, home: Path) -> Path:
    raw = {
        "family": family,
        "base_model": str(tiny_model(family)),
        "data_dir": str(dataset),
        "output_name": f"ot-{family}",
        "resolution": 32,
        "steps": 3,
        "batch_size": 2,
        "learning_rate": 5e-2,
        "lora_rank": 4,
        "max_sequence_length": 16,
    }
    result = train(parse_train_config(raw), [].append, settings=Settings(home=home), device="cpu")
    assert result.lora_path is not None
    return result.lora_path


def _as_onetrainer(ours: Path, family: str, out: Path) -> Path:
    """Our file's layers renamed to OneTrainer's spelling, each with alpha = 2 x rank and its up
    matrix halved (the same change; a lost alpha shows as half the change)."""
    tensors, metadata = read_lora_file(ours)
    lora = peft_from_file(tensors, metadata, family)
    scale = lora.alpha / lora.rank
    theirs = {}
    for key, value in lora.tensors.items():
        module, part = key.rsplit(".lora_", 1)
        flat = "lora_transformer_" + module.replace(".", "_")
        if part.startswith("A"):
            theirs[f"{flat}.lora_down.weight"] = value.contiguous()
            theirs[f"{flat}.alpha"] = torch.tensor(2.0 * value.shape[0])
        else:
            theirs[f"{flat}.lora_up.weight"] = (value * scale / 2).contiguous()
    assert any("_to_q." in k for k in theirs)  # names with underscores of their own
    save_file(theirs, out, {"format": "pt"})
    return out


def _image(pipe, family: str) -> np.ndarray:
    img = generate_image(pipe, family, prompt=PROMPT, seed=3, steps=2, width=32, height=32)
    return np.asarray(img).astype(np.int16)


def _deltas(pipe) -> dict[str, torch.Tensor]:
    """{module: the weight change its active adapters apply now} (peft's own delta, scaled)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    out = {}
    for name, module in pipe.transformer.named_modules():
        if isinstance(module, BaseTunerLayer):
            out[name] = sum(module.get_delta_weight(a) for a in module.active_adapters if a in module.lora_A)
    return out


@pytest.mark.parametrize("family", ["qwen-image", "z-image"])
def test_a_onetrainer_file_converts_and_generates_as_the_original(
    family, tiny_model, sample_dataset, tmp_path
):
    ours = _trained(family, tiny_model, sample_dataset, tmp_path / "home")
    theirs = _as_onetrainer(ours, family, tmp_path / "onetrainer.safetensors")
    files = {"theirs": theirs}
    for to in ("diffusers", "kohya"):
        out = tmp_path / f"to-{to}.safetensors"
        result = _cli("convert", str(theirs), str(out), "--to", to, "--family", family)
        assert result.exit_code == 0, result.output
        files[to] = out
    assert any(k.startswith("transformer.") for k in load_file(str(files["diffusers"])))

    pipe = load_pipeline(str(tiny_model(family)), family, device="cpu")
    base = _image(pipe, family)
    apply_loras(pipe, [(ours, 1.0)])
    want, want_delta = _image(pipe, family), _deltas(pipe)
    assert np.abs(want - base).max() > 2  # the trained LoRA visibly changes the image
    apply_loras(pipe, [(ours, 0.5)])
    want_half = _image(pipe, family)
    for label, path in files.items():
        apply_loras(pipe, [(path, 1.0)])
        got_delta = _deltas(pipe)
        assert got_delta.keys() == want_delta.keys(), label
        for name, delta in want_delta.items():
            torch.testing.assert_close(got_delta[name], delta, rtol=1e-4, atol=1e-6, msg=f"{label} {name}")
        assert np.abs(_image(pipe, family) - want).max() <= 1, label
        apply_loras(pipe, [(path, 0.5)])
        for name, delta in _deltas(pipe).items():  # half the change in every layer
            torch.testing.assert_close(delta, 0.5 * want_delta[name], rtol=1e-4, atol=1e-6, msg=name)
        assert np.abs(_image(pipe, family) - want_half).max() <= 1, label
    apply_loras(pipe, [])
    assert np.array_equal(_image(pipe, family), base)
