"""Generation of OneTrainer files with text-encoder layers (tests/unit/lora/te_files.py builds
them on the tiny pipelines' real modules, beside the same LoRA in the diffusers layout):

- SDXL (U-Net + CLIP-L + CLIP-G with its text_projection): the image of the diffusers-layout file,
  at strength 1 and 0.5, each layer's change the same (half at 0.5);
- FLUX.1 (transformer with a single block's proj_out / proj_mlp / norm + CLIP-L + T5): the image
  of the diffusers-layout transformer + CLIP-L file with T5's change merged by hand
  (W + strength * (alpha / rank) * up @ down, ComfyUI's rule), T5's weights exactly that, and
  exactly the originals again once the LoRA is off;
- Qwen-Image: a text-encoder key refused naming it and the reason, the pipeline left as it was.

Before: the FLUX.1 file failed an assertion in diffusers' converter (a T5 `lora_te2_` key in a
OneTrainer file; an sd-scripts file's T5 keys were dropped with a warning) and, without T5, a
KeyError (its reader names only attention layers); the Qwen-Image key was refused as "not a
qwen-image kohya/ComfyUI key", without the reason."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from tests.unit.lora.te_files import chroma_files, flux_files, sdxl_files

from lorastudio.errors import ModelSourceError
from lorastudio.generate import apply_loras, generate_image, load_pipeline
from lorastudio.lora.files import convert_file

PROMPT = "a red circle on a blue background"


def _image(pipe, family: str) -> np.ndarray:
    img = generate_image(pipe, family, prompt=PROMPT, seed=3, steps=2, width=32, height=32)
    return np.asarray(img).astype(np.int16)


def _deltas(pipe) -> dict[str, torch.Tensor]:
    """{component.module: the weight change its active adapters apply now} (peft's, scaled)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    out = {}
    for component, model in pipe.components.items():
        if not isinstance(model, torch.nn.Module):
            continue
        for name, module in model.named_modules():
            if isinstance(module, BaseTunerLayer):
                active = [a for a in module.active_adapters if a in module.lora_A]
                out[f"{component}.{name}"] = sum(module.get_delta_weight(a) for a in active)
    return out


def _assert_same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], factor: float = 1.0) -> None:
    assert got.keys() == want.keys()
    for name, delta in want.items():
        torch.testing.assert_close(got[name], factor * delta, rtol=1e-4, atol=1e-6, msg=name)


def test_onetrainers_sdxl_file_generates_as_its_diffusers_equivalent(tiny_model, tmp_path):
    pipe = load_pipeline(str(tiny_model("sdxl")), "sdxl", device="cpu")
    theirs, ours = sdxl_files(pipe)
    files = {"theirs": tmp_path / "theirs.safetensors", "ours": tmp_path / "ours.safetensors"}
    save_file(theirs, files["theirs"])
    save_file(ours, files["ours"])
    unet_only = tmp_path / "unet-only.safetensors"
    save_file({k: v for k, v in ours.items() if k.startswith("unet.")}, unet_only)
    base = _image(pipe, "sdxl")
    apply_loras(pipe, [(unet_only, 1.0)])
    without_encoders = _image(pipe, "sdxl")
    apply_loras(pipe, [(files["ours"], 1.0)])
    want, want_deltas = _image(pipe, "sdxl"), _deltas(pipe)
    assert any(k.startswith("text_encoder_2.") and k.endswith("text_projection") for k in want_deltas)
    assert np.abs(want - without_encoders).max() > 2  # the encoders' layers change the image
    apply_loras(pipe, [(files["ours"], 0.5)])
    want_half = _image(pipe, "sdxl")
    apply_loras(pipe, [(files["theirs"], 1.0)])
    _assert_same(_deltas(pipe), want_deltas)
    assert np.abs(_image(pipe, "sdxl") - want).max() <= 1
    apply_loras(pipe, [(files["theirs"], 0.5)])
    _assert_same(_deltas(pipe), want_deltas, 0.5)
    assert np.abs(_image(pipe, "sdxl") - want_half).max() <= 1
    for to in ("kohya", "diffusers"):  # what `lora convert` writes of it renders the same
        converted = convert_file(files["theirs"], tmp_path / f"{to}.safetensors", to, "sdxl")
        apply_loras(pipe, [(tmp_path / f"{to}.safetensors", 1.0)])
        assert np.abs(_image(pipe, "sdxl") - want).max() <= 1, (to, converted)
    apply_loras(pipe, [])
    assert np.array_equal(_image(pipe, "sdxl"), base)


def test_onetrainers_flux_file_with_clip_and_t5_generates_with_t5_merged(flux_pipe, tmp_path):
    pipe = flux_pipe
    theirs, ours, t5_changes = flux_files(pipe)
    src, equivalent = tmp_path / "theirs.safetensors", tmp_path / "ours.safetensors"
    save_file(theirs, src)
    save_file(ours, equivalent)
    t5 = {name: pipe.text_encoder_2.get_submodule(name).weight for name in t5_changes}
    originals = {name: w.detach().clone() for name, w in t5.items()}
    base = _image(pipe, "flux")
    images = {}
    for strength in (1.0, 0.5):
        apply_loras(pipe, [(equivalent, strength)])  # the transformer and CLIP-L, by diffusers
        without_t5 = _image(pipe, "flux")
        with torch.no_grad():
            for name, w in t5.items():  # T5 by hand: W + strength * 2 * up @ down
                w.copy_(originals[name] + strength * t5_changes[name])
        want, want_deltas = _image(pipe, "flux"), _deltas(pipe)
        with torch.no_grad():
            for name, w in t5.items():
                w.copy_(originals[name])
        assert np.abs(want - without_t5).max() > 2  # T5's layers change the image
        apply_loras(pipe, [(src, strength)])
        _assert_same(_deltas(pipe), want_deltas)
        for name, w in t5.items():
            torch.testing.assert_close(w, originals[name] + strength * t5_changes[name], rtol=1e-5, atol=1e-6)
        images[strength] = _image(pipe, "flux")
        assert np.abs(images[strength] - want).max() <= 1, strength
    assert np.abs(images[1.0] - base).max() > 2
    # the kohya file `lora convert` writes of it (BFL names, fused q/k/v, T5 as lora_te2_: an
    # sd-scripts file's spelling, whose T5 layers diffusers dropped with a warning) renders the same
    kohya = tmp_path / "kohya.safetensors"
    convert_file(src, kohya, "kohya", "flux")
    apply_loras(pipe, [(kohya, 1.0)])
    assert np.abs(_image(pipe, "flux") - images[1.0]).max() <= 1
    apply_loras(pipe, [])  # T5's originals back, bit for bit
    assert all(torch.equal(w, originals[name]) for name, w in t5.items())
    assert np.array_equal(_image(pipe, "flux"), base)


@pytest.mark.parametrize("prefix", ["lora_te_", "lora_te1_"])  # OneTrainer's Chroma name, ComfyUI's
def test_a_chroma_file_with_t5_layers_generates_with_t5_merged(prefix, tiny_model, tmp_path):
    """Chroma's one text encoder is FLUX.1's T5: its layers (OneTrainer's `lora_te_`, ComfyUI's
    `lora_te1_`) are merged into T5 at the strength, the transformer's loaded by diffusers; the
    kohya file `lora convert` writes of it renders the same. Before: refused ("chroma takes no
    text-encoder LoRA here")."""
    pipe = load_pipeline(str(tiny_model("chroma")), "chroma", device="cpu")
    theirs, ours, t5_changes = chroma_files(pipe, prefix)
    src, equivalent = tmp_path / "theirs.safetensors", tmp_path / "ours.safetensors"
    save_file(theirs, src)
    save_file(ours, equivalent)
    t5 = {name: pipe.text_encoder.get_submodule(name).weight for name in t5_changes}
    originals = {name: w.detach().clone() for name, w in t5.items()}
    base = _image(pipe, "chroma")
    images = {}
    for strength in (1.0, 0.5):
        apply_loras(pipe, [(equivalent, strength)])  # the transformer, by diffusers
        without_t5 = _image(pipe, "chroma")
        with torch.no_grad():
            for name, w in t5.items():  # T5 by hand: W + strength * 2 * up @ down
                w.copy_(originals[name] + strength * t5_changes[name])
        want, want_deltas = _image(pipe, "chroma"), _deltas(pipe)
        with torch.no_grad():
            for name, w in t5.items():
                w.copy_(originals[name])
        assert np.abs(want - without_t5).max() > 2  # T5's layers change the image
        apply_loras(pipe, [(src, strength)])
        _assert_same(_deltas(pipe), want_deltas)
        for name, w in t5.items():
            torch.testing.assert_close(w, originals[name] + strength * t5_changes[name], rtol=1e-5, atol=1e-6)
        images[strength] = _image(pipe, "chroma")
        assert np.abs(images[strength] - want).max() <= 1, strength
    kohya = tmp_path / "kohya.safetensors"  # T5 as lora_te1_, ComfyUI's Chroma name
    convert_file(src, kohya, "kohya", "chroma")
    assert any(k.startswith("lora_te1_encoder_block_0_") for k in load_file(str(kohya)))
    apply_loras(pipe, [(kohya, 1.0)])
    assert np.abs(_image(pipe, "chroma") - images[1.0]).max() <= 1
    apply_loras(pipe, [])  # T5's originals back, bit for bit
    assert all(torch.equal(w, originals[name]) for name, w in t5.items())
    assert np.array_equal(_image(pipe, "chroma"), base)


def test_a_qwen_image_text_encoder_layer_is_refused_in_generation(tiny_model, tmp_path):
    pipe = load_pipeline(str(tiny_model("qwen-image")), "qwen-image", device="cpu")
    q = pipe.transformer.get_submodule("transformer_blocks.0.attn.to_q")
    key = "lora_te_model_language_model_layers_0_self_attn_q_proj"
    tensors = {
        "lora_transformer_transformer_blocks_0_attn_to_q.lora_down.weight": torch.ones(2, q.in_features),
        "lora_transformer_transformer_blocks_0_attn_to_q.lora_up.weight": torch.ones(q.out_features, 2),
        f"{key}.lora_down.weight": torch.ones(2, 16),
        f"{key}.lora_up.weight": torch.ones(16, 2),
        f"{key}.alpha": torch.tensor(2.0),
    }
    path = tmp_path / "qwen-te.safetensors"
    save_file(tensors, path)
    base = _image(pipe, "qwen-image")
    with pytest.raises(ModelSourceError, match=rf"{key}.*Qwen2\.5-VL.*is not patched"):
        apply_loras(pipe, [(path, 1.0)])
    assert not any(pipe.get_list_adapters().values())
    assert np.array_equal(_image(pipe, "qwen-image"), base)
