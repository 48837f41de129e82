"""Generating with the LyCORIS-layout files the studio's own runs write (adapter = "lokr" / "loha",
and DoRA with lora_format = "kohya", SDXL's default layout): diffusers' load_lora_weights cannot
read them ("Invalid LoRA checkpoint"), so Generate / `lorastudio generate` refused every LoKr run's
result. They are merged into the denoiser's weights the way ComfyUI merges them: each adapted
layer then computes what the trained model computed, the scale is honoured, and the next call
restores the base exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from lorastudio.cli.app import _register, app
from lorastudio.config import parse_train_config
from lorastudio.errors import ModelSourceError
from lorastudio.generate import apply_loras, generate_image, load_pipeline
from lorastudio.lora.lycoris import module_key
from lorastudio.settings import Settings
from lorastudio.training.loop import train

PROMPT = "a red circle on a blue background"


def _run(family, adapter, tiny_model, dataset, home, **extra):
    raw = {
        "family": family,
        "base_model": str(tiny_model(family)),
        "data_dir": str(dataset),
        "output_name": f"gen-{family}-{adapter}",
        "resolution": 64 if family == "sdxl" else 32,
        "steps": 6,
        "batch_size": 4,
        "learning_rate": 3e-2,
        "lora_rank": 4,
        "adapter": adapter,
        **({"max_sequence_length": 16} if family != "sdxl" else {}),
        **extra,
    }
    result = train(
        parse_train_config(raw), [].append, settings=Settings(home=home), device="cpu", return_denoiser=True
    )
    assert result.lora_path is not None
    return result


@pytest.fixture(scope="module")
def runs(tiny_model, sample_dataset, tmp_path_factory):
    home = tmp_path_factory.mktemp("lycoris-home")
    return {
        "lokr": _run("flux", "lokr", tiny_model, sample_dataset, home),
        "loha": _run("flux", "loha", tiny_model, sample_dataset, home),
        "sdxl-dora": _run("sdxl", "dora", tiny_model, sample_dataset, home),
    }


@pytest.fixture(scope="module")
def pipes(tiny_model):
    return {f: load_pipeline(str(tiny_model(f)), f, device="cpu") for f in ("flux", "sdxl")}


def _img(pipe, family) -> np.ndarray:
    extra, side = ({}, 64) if family == "sdxl" else ({"max_sequence_length": 16}, 32)
    image = generate_image(pipe, family, prompt=PROMPT, seed=0, steps=2, width=side, height=side, extra=extra)
    return np.asarray(image, dtype=np.float32)


def _adapted(denoiser):
    return {n: m for n, m in denoiser.named_modules() if hasattr(m, "get_base_layer") and "." in n}


@pytest.mark.parametrize(("key", "family"), [("lokr", "flux"), ("loha", "flux"), ("sdxl-dora", "sdxl")])
def test_a_lycoris_run_generates_with_its_trained_layers(runs, pipes, key, family):
    result, pipe = runs[key], pipes[family]
    tensors = load_file(str(result.lora_path))
    assert tensors and all(k.startswith("lycoris_") for k in tensors)  # the layout diffusers refuses
    apply_loras(pipe, [])
    base = _img(pipe, family)
    denoiser = pipe.transformer if family == "flux" else pipe.unet
    before = {n: p.detach().clone() for n, p in denoiser.named_parameters()}
    apply_loras(pipe, [(result.lora_path, 1.0)])
    layers = dict(denoiser.named_modules())
    trained, moved = _adapted(result.denoiser), []
    assert trained
    for name, module in trained.items():
        if module_key(name) + ".alpha" not in tensors:
            continue
        width = module.get_base_layer().weight.shape[1]
        inputs = torch.randn(3, width, generator=torch.Generator().manual_seed(0))  # [3, in]
        with torch.no_grad():
            want = module(inputs)  # the trained adapter through peft's forward
            torch.testing.assert_close(layers[name](inputs), want, rtol=1e-4, atol=1e-5)
            moved.append(float((want - module.get_base_layer()(inputs)).abs().max()))
    assert max(moved) > 1e-3  # the adapter changed the layers, so the check above can fail
    full = _img(pipe, family)
    assert np.abs(full - base).mean() > 0.2
    full_weights = {n: p.detach().clone() for n, p in denoiser.named_parameters()}
    apply_loras(pipe, [(result.lora_path, 0.5)])  # the scale is honoured (not stacked on 1.0)
    changed = 0
    for n, p in denoiser.named_parameters():  # ComfyUI's strength: half the change, DoRA's too
        change = full_weights[n] - before[n]
        if change.abs().max() > 0:
            torch.testing.assert_close(p - before[n], 0.5 * change, rtol=1e-4, atol=1e-6)
            changed += 1
    assert changed
    half = _img(pipe, family)
    assert np.abs(half - base).mean() > 0.05 and np.abs(half - full).mean() > 0.05
    apply_loras(pipe, [(result.lora_path, 0.0)])
    np.testing.assert_array_equal(_img(pipe, family), base)
    apply_loras(pipe, [])  # the base weights come back exactly
    for n, p in denoiser.named_parameters():
        assert torch.equal(p, before[n]), n
    np.testing.assert_array_equal(_img(pipe, family), base)


def test_lycoris_and_diffusers_loras_together_and_a_foreign_file_refused(runs, pipes, flux_lora, tmp_path):
    pipe = pipes["flux"]
    apply_loras(pipe, [])
    base = _img(pipe, "flux")
    apply_loras(pipe, [(runs["lokr"].lora_path, 1.0), (flux_lora, 1.0)])
    both = _img(pipe, "flux")
    apply_loras(pipe, [(runs["lokr"].lora_path, 1.0)])
    lokr = _img(pipe, "flux")
    assert np.abs(both - lokr).mean() > 0.2 and not any(pipe.get_list_adapters().values())
    with pytest.raises(ModelSourceError, match=r"are not layers of this FluxPipeline \(lycoris_"):
        apply_loras(pipe, [(runs["sdxl-dora"].lora_path, 1.0)])  # an SDXL file on FLUX.1
    np.testing.assert_array_equal(_img(pipe, "flux"), base)  # left with no LoRA
    bad = tmp_path / "bad.safetensors"
    tensors = load_file(str(runs["lokr"].lora_path))
    key = next(k for k in tensors if k.endswith(".lokr_w2"))
    save_file({**tensors, key: torch.zeros(3, 3)}, str(bad))  # a patch of the wrong shape
    with pytest.raises(ModelSourceError, match="patch .* vs weight"):
        apply_loras(pipe, [(runs["lokr"].lora_path, 1.0), (bad, 1.0)])
    np.testing.assert_array_equal(_img(pipe, "flux"), base)
    tucker = tmp_path / "tucker.safetensors"  # a conv Tucker factor: not merged wrongly, refused
    save_file({**tensors, key.replace(".lokr_w2", ".lokr_t2"): torch.zeros(2, 2, 3, 3)}, str(tucker))
    with pytest.raises(ModelSourceError, match="Tucker-decomposed tensors \\(lokr_t2\\) are not supported"):
        apply_loras(pipe, [(tucker, 1.0)])
    np.testing.assert_array_equal(_img(pipe, "flux"), base)


def test_generate_cli_takes_a_lokr_run(runs, tiny_model, tmp_path):
    _register()
    out = tmp_path / "img.png"
    args = ["generate", "--base", str(tiny_model("flux")), "--lora", f"{runs['lokr'].lora_path}:0.8"]
    args += ["--prompt", PROMPT, "--steps", "2", "--width", "32", "--height", "32", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert out.is_file() and "1 LoRA(s)" in result.output


def test_lora_convert_names_a_lycoris_file_as_such(runs, tmp_path):
    """`lorastudio lora convert / resize` take LoRA files only; a LyCORIS one is named as what it
    is (it was "not a diffusers or kohya LoRA of a denoiser", as for a broken file)."""
    _register()
    for args in (["convert", str(runs["lokr"].lora_path), str(tmp_path / "k.safetensors"), "--to", "kohya"],
                 ["resize", str(runs["loha"].lora_path), "--rank", "2", "--out", str(tmp_path / "r.safetensors")]):  # fmt: skip
        result = CliRunner().invoke(app, ["lora", *args])  # main() prints the error, exits 2
        assert isinstance(result.exception, ModelSourceError), result.output
        assert "a LyCORIS file (LoKr, LoHa or DoRA" in str(result.exception)
    assert list(tmp_path.iterdir()) == []


def test_an_sdxl_dora_in_kohya_names_merges_as_the_run_wrote_it(runs, pipes, tmp_path):
    """kohya sd-scripts' LyCORIS DoRA for SDXL: `lora_unet_<SGM name>` with `.dora_scale` (ComfyUI's
    layout, which diffusers' loader reads as a plain LoRA). The run's own DoRA renamed so merges to
    the very weights of the run's file (generate/lycoris_names.py)."""
    from lorastudio.lora import names
    from lorastudio.lora.lycoris import PREFIX

    pipe, unet = pipes["sdxl"], pipes["sdxl"].unet
    tensors = load_file(str(runs["sdxl-dora"].lora_path))
    denoiser_modules = {module_key(n): n for n, _ in unet.named_modules() if n}
    renamed = {}
    for key, value in tensors.items():
        layer, _, suffix = key.partition(".")
        native = names.to_original(denoiser_modules[layer], "sdxl")
        renamed[f"lora_unet_{native.replace('.', '_')}.{suffix}"] = value
    assert all(not k.startswith(PREFIX) for k in renamed) and any(k.endswith(".dora_scale") for k in renamed)
    kohya = tmp_path / "kohya-dora.safetensors"
    save_file(renamed, str(kohya))
    apply_loras(pipe, [(runs["sdxl-dora"].lora_path, 0.7)])
    want = {n: p.detach().clone() for n, p in unet.named_parameters()}
    apply_loras(pipe, [(kohya, 0.7)])
    assert not any(pipe.get_list_adapters().values())  # merged, not loaded as a plain LoRA
    for n, p in unet.named_parameters():
        assert torch.equal(p, want[n]), n
    apply_loras(pipe, [])
