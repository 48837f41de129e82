"""The adapters of TrainConfig.adapter (peft's LoRA with DoRA, LoHa, LoKr) on the tiny models: each
learns (the loss of a fixed batch falls); the file each writes loads where users load it, to the
same layer outputs as the trained model: LoHa / LoKr / DoRA in the LyCORIS layout ComfyUI reads
(merged here the way ComfyUI's comfy/weight_adapter readers merge, lora/lycoris.py), DoRA also in
diffusers' layout (diffusers' own loader); rank / alpha patterns reach the layers and the file;
a stopped run resumes bitwise; settings an adapter cannot honour are refused."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from methods_cases import mini_config, mini_run
from safetensors import safe_open
from safetensors.torch import load_file

from lorastudio import families
from lorastudio.config import parse_train_config
from lorastudio.errors import ConfigError
from lorastudio.lora.lycoris import COMFY_SUFFIXES, comfy_delta, generic_spelling, kohya_spelling, layer_key
from lorastudio.lora.metadata import BASE_MODEL_VERSION
from lorastudio.settings import get_settings
from lorastudio.training.adapters.lora import module_scales
from lorastudio.training.loop import train
from stop_at import stop_at

ADAPTERS = ["dora", "loha", "lokr"]


@pytest.mark.parametrize("family", ["flux", "sdxl"])
@pytest.mark.parametrize("adapter", ADAPTERS)
def test_each_adapter_learns(family, adapter, tiny_model):
    run = mini_run(mini_config(family, tiny_model(family), adapter=adapter), steps=4)
    assert all(b < a for a, b in zip(run.losses, run.losses[1:], strict=False)), run.losses
    names = {n for n, p in run.denoiser.named_parameters() if p.requires_grad}
    marker = {"dora": "lora_magnitude_vector", "loha": "hada_w1_a", "lokr": "lokr_w1"}[adapter]
    assert any(marker in n for n in names) and not any(".lora_A." in n for n in names if adapter != "dora")


def _adapted(denoiser):
    return {
        n: m
        for n, m in denoiser.named_modules()
        if hasattr(m, "get_base_layer") and n in module_scales(denoiser)
    }


def _comfy_weight(parts: dict[str, torch.Tensor], base: torch.Tensor) -> torch.Tensor:
    """The weight ComfyUI patches from one module's LyCORIS tensors (strength 1)."""
    if "dora_scale" in parts:  # comfy/weight_adapter/base.py weight_decompose, output axis
        scale = float(parts["alpha"]) / parts["lora_down.weight"].shape[0]
        merged = base + parts["lora_up.weight"] @ parts["lora_down.weight"] * scale  # [out, in]
        norm = base.norm(dim=1, keepdim=True) + torch.finfo(base.dtype).eps  # [out, 1]
        return merged * (parts["dora_scale"] / norm)
    return base + comfy_delta(parts)


@pytest.mark.parametrize(
    ("family", "adapter", "extra"),
    [
        ("flux", "lokr", {}),
        ("flux", "lokr", {"lokr_decompose_both": True, "lora_rank": 2, "lokr_factor": 4}),
        ("sdxl", "lokr", {"alpha_pattern": {"to_k": 2.0}}),
        ("flux", "loha", {"rank_pattern": {"to_k": 2}}),
        ("sdxl", "loha", {}),
        ("flux", "dora", {"lora_format": "kohya"}),
        ("z-image", "lokr", {}),
        ("qwen-image", "loha", {}),
        ("flux2", "lokr", {}),  # ComfyUI maps FLUX.2's diffusers names through FLUX.1's table
    ],
)
def test_the_lycoris_file_gives_comfyui_the_trained_weights(family, adapter, extra, make_config):
    result = train(
        make_config(family, adapter=adapter, **extra), [].append, device="cpu", return_denoiser=True
    )
    tensors = load_file(str(result.lora_path))
    generic = generic_spelling(family, adapter)  # Z-Image LoKr: diffusion_model.<diffusers name>
    kohya = kohya_spelling(family, adapter)  # SDXL LoHa / LoKr: lora_unet_<SGM name> (RELIABILITY 1980)
    prefix = "diffusion_model." if generic else "lora_unet_" if kohya else "lycoris_"
    assert tensors and all(
        k.startswith(prefix) and any(k.endswith("." + x) for x in COMFY_SUFFIXES) for k in tensors
    )
    sidecar = json.loads(result.lora_path.with_suffix(".json").read_text())
    with safe_open(str(result.lora_path), "pt") as fh:
        header = fh.metadata()
    # kohya's ss_* keys of every kohya-layout file (the base model, the run's facts), LyCORIS's own network keys
    assert header["ss_base_model_version"] == BASE_MODEL_VERSION[family], header
    assert header["ss_steps"] == header["lorastudio.steps"] == str(result.steps_run)
    assert header["ss_output_name"] == header["lorastudio.output_name"] and header["ss_resolution"]
    assert header["ss_network_module"] == "lycoris.kohya"
    assert json.loads(header["ss_network_args"])["algo"] == ("lora" if adapter == "dora" else adapter)
    # the rule its dora_scale follows, which kohya's LyCORIS keys leave open (lora/dora_rule.py)
    assert header.get("lorastudio.dora_scale") == ("comfyui" if adapter == "dora" else None)
    # the SAI model spec's keys: a LyCORIS file's architecture ends in /lycoris, its keys the original names'
    base = {"flux": "flux-1-dev", "sdxl": "stable-diffusion-xl-v1-base", "z-image": "z-image"}
    base |= {"qwen-image": "qwen-image", "flux2": "flux-2-dev"}
    assert header["modelspec.sai_model_spec"] == "1.0.0"
    assert header["modelspec.architecture"] == f"{base[family]}/lycoris"
    assert header["modelspec.implementation"] != "diffusers" or family in ("z-image", "qwen-image")
    assert header["modelspec.title"] == header["lorastudio.output_name"]
    data = result.lora_path.read_bytes()  # hash_sha256: the tensor content, the header excluded
    content = data[8 + int.from_bytes(data[:8], "little") :]
    assert header["modelspec.hash_sha256"] == "0x" + hashlib.sha256(content).hexdigest()
    assert sidecar["adapter"] == adapter and sidecar["lora_format"] == "kohya"
    comfy = sidecar["loaders"]["comfyui"]
    assert (comfy["checked"], comfy["ok"], comfy["unconsumed"], comfy["mismatched"]) == (True, True, [], [])
    # the LyCORIS layout of each adapter went through ComfyUI v0.19.3's own loader (bench/comfyui_check.py);
    # Z-Image LoKr's diffusion_model. spelling through upstream de6b062f's (session 38), and diffusers
    # 0.42's Z-Image reader loads it too (RELIABILITY 1700: the lycoris_ spelling it refused)
    assert comfy["loader_checked"].startswith(
        "ComfyUI v0.33.0+34 (de6b062" if generic else "ComfyUI v0.19.3 (3086026"
    )
    if family == "z-image":
        diffusers = sidecar["loaders"]["diffusers"]
        assert (diffusers["checked"], diffusers["ok"]) == (True, True), diffusers
    denoiser = result.denoiser
    scales = module_scales(denoiser)
    adapted, moved = _adapted(denoiser), []
    assert adapted
    for name, module in adapted.items():
        x = layer_key(name, generic, kohya)
        parts = {k.removeprefix(x + "."): v for k, v in tensors.items() if k.startswith(x + ".")}
        base = module.get_base_layer().weight.detach().float()  # [out, in]
        inputs = torch.randn(3, base.shape[1], generator=torch.Generator().manual_seed(0))  # [3, in]
        with torch.no_grad():
            want = module(inputs)  # peft's forward with the trained adapter
            bias = module.get_base_layer().bias
            got = torch.nn.functional.linear(inputs, _comfy_weight(parts, base), bias)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        moved.append(float((want - torch.nn.functional.linear(inputs, base, bias)).abs().max()))
        if "lokr_w1_a" in parts or "lokr_w2_a" in parts or "hada_w1_a" in parts or "dora_scale" in parts:
            assert float(parts["alpha"]) == scales[name][1]  # the per-module alpha (patterns included)
    assert max(moved) > 1e-3  # the adapter changed the layers (so the check above can fail)
    if "rank_pattern" in extra:
        assert {r for n, (r, _) in scales.items() if n.endswith("to_k")} == {2}
        assert {r for n, (r, _) in scales.items() if n.endswith("to_q")} == {4}
    if "alpha_pattern" in extra:
        assert {a for n, (_, a) in scales.items() if n.endswith("to_k")} == {2.0}


@pytest.mark.parametrize("adapter", ["dora", "loha"])
def test_conv_layers_get_the_lycoris_tensors_comfyui_reshapes_onto_the_4d_weight(adapter, make_config):
    """SDXL's 3x3 convs: the kernel is part of each output row (DoRA's scale [out, 1, 1, 1], LoHa's
    factors [r, in x 3 x 3]); the save-time check passes them, and ComfyUI's product reshaped onto
    the 4-D weight (its weight_adapter readers, restated as in _comfy_weight) is peft's merged weight."""
    extra = {"lora_format": "kohya"} if adapter == "dora" else {}
    cfg = make_config("sdxl", adapter=adapter, lora_targets=["conv1"], **extra)
    result = train(cfg, [].append, device="cpu", return_denoiser=True)
    tensors = load_file(str(result.lora_path))
    comfy = json.loads(result.lora_path.with_suffix(".json").read_text())["loaders"]["comfyui"]
    assert (comfy["ok"], comfy["unconsumed"], comfy["mismatched"]) == (True, [], []), comfy
    moved = []
    for name, module in _adapted(result.denoiser).items():
        x = layer_key(name, kohya=kohya_spelling("sdxl", adapter))
        parts = {k.removeprefix(x + "."): v.float() for k, v in tensors.items() if k.startswith(x + ".")}
        base = module.get_base_layer().weight.detach().float().clone()  # [out, in, 3, 3]
        assert base.dim() == 4
        if adapter == "dora":
            assert parts["dora_scale"].shape == (base.shape[0], 1, 1, 1)
            up, down = (
                parts["lora_up.weight"].flatten(1),
                parts["lora_down.weight"].flatten(1),
            )  # [out, r], [r, in*9]
            delta = (up @ down).reshape(base.shape) * float(parts["alpha"]) / down.shape[0]
            norm = base.flatten(1).norm(dim=1).reshape(-1, 1, 1, 1) + torch.finfo(base.dtype).eps
            patched = (base + delta) * parts["dora_scale"] / norm
        else:
            patched = base + comfy_delta(parts).reshape(base.shape)
        with torch.no_grad():
            module.merge(adapter_names=["default"])  # peft's own merge
        merged = module.get_base_layer().weight.detach().float()
        torch.testing.assert_close(patched, merged, rtol=1e-5, atol=1e-6)
        moved.append(float((merged - base).abs().max()))
    assert moved and max(moved) > 1e-4  # the adapter changed the convs (so the check above can fail)


@pytest.mark.parametrize("family", ["flux", "sdxl"])
def test_dora_in_the_diffusers_layout_reloads_to_the_same_outputs(family, make_config, tiny_model):
    result = train(
        make_config(family, adapter="dora", lora_format="diffusers"),
        [].append,
        device="cpu",
        return_denoiser=True,
    )
    tensors = load_file(str(result.lora_path))
    assert any(k.endswith("lora_magnitude_vector") for k in tensors)
    fam = families.get(family)
    fresh = fam.load_denoiser(str(tiny_model(family)), None, torch.float32, torch.device("cpu"))
    prefix = "unet" if family == "sdxl" else "transformer"
    fresh.load_lora_adapter(str(result.lora_path), prefix=prefix, adapter_name="default")
    trained, reloaded = _adapted(result.denoiser), dict(fresh.named_modules())
    assert trained
    moved = []
    for name, module in trained.items():
        width = module.get_base_layer().weight.shape[1]
        inputs = torch.randn(3, width, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            want = module(inputs)
            torch.testing.assert_close(reloaded[name](inputs), want, rtol=1e-5, atol=1e-6)
            moved.append(float((want - module.get_base_layer()(inputs)).abs().max()))
    assert max(moved) > 1e-3  # the adapter changed the layers


@pytest.mark.parametrize(
    ("family", "adapter"),
    [("flux", "lokr"), ("sdxl", "loha"), ("flux", "dora"), ("z-image", "lokr"), ("qwen-image", "dora")],
)
def test_stop_and_resume_is_bitwise(family, adapter, make_config):
    settings = {"steps": 4, "caption_dropout": 0.3, "adapter": adapter}
    full = train(make_config(family, output_name="full", **settings), [].append, device="cpu")
    events, stop = stop_at(2)
    train(make_config(family, output_name="part", **settings), events.append, stop, device="cpu")
    run_dir = get_settings().outputs_dir / "part"
    resumed = train(
        make_config(family, output_name="part", **settings), [].append, device="cpu", resume=run_dir
    )
    assert resumed.losses == full.losses
    a, b = load_file(str(full.lora_path)), load_file(str(resumed.lora_path))
    assert a.keys() == b.keys() and a and all(torch.equal(a[k], b[k]) for k in a)


def _base(**kw):
    return {"family": "flux", "base_model": "a/b", "data_dir": "d", **kw}


def test_settings_an_adapter_cannot_honour_are_refused():
    with pytest.raises(ConfigError) as err:
        parse_train_config(_base(lokr_factor=4, lokr_decompose_both=True))
    assert {p.field for p in err.value.problems} == {"lokr_factor", "lokr_decompose_both"}
    with pytest.raises(ConfigError) as err:
        parse_train_config(
            _base(adapter="loha", lora_format="diffusers", lora_dropout=0.1, base_precision="nf4")
        )
    assert {p.field for p in err.value.problems} == {"lora_format", "lora_dropout", "base_precision"}
    assert "diffusers cannot load a loha file" in str(err.value)
    with pytest.raises(ConfigError, match="fuse_projections"):
        parse_train_config(_base(adapter="dora", fuse_projections="on"))
    with pytest.raises(ConfigError, match="rank_pattern"):
        parse_train_config(_base(lora_format="kohya", rank_pattern={"to_k": 2}))
    with pytest.raises(ConfigError, match="lokr_factor"):
        parse_train_config(_base(adapter="lokr", lokr_factor=0))


@pytest.mark.parametrize(
    ("family", "settings", "refusal"),
    [
        (
            "flux",
            {"adapter": "lokr", "rank_pattern": {"to_nothing": 2}},
            "rank_pattern: 'to_nothing' matches no adapted layer",
        ),
        (
            "flux",
            {"lora_targets": ["to_q"], "alpha_pattern": {"to_k": 2.0}},
            "alpha_pattern: 'to_k' matches no adapted",
        ),
        (
            "flux",
            {"adapter": "loha", "lora_targets": ["ff"]},
            "'ff' names FeedForward modules .*ff.net.0.proj",
        ),
        (
            "sdxl",
            {"adapter": "dora", "lora_targets": ["to_qq"]},
            "no layer of the UNet2DConditionModel is named to_qq",
        ),
        ("qwen-image", {"adapter": "lokr", "lora_targets": ["attn"]}, "'attn' names Attention modules"),
        ("krea2", {"lora_targets": ["norm1"]}, "'norm1' names"),
    ],
)
def test_targets_and_patterns_that_cannot_be_honoured_are_refused_before_any_load(
    family, settings, refusal, make_config
):
    """A lora_targets / rank_pattern / alpha_pattern entry the denoiser cannot honour was refused
    when the adapter was added: after the text encoders, the VAE and the latent cache (minutes of
    a real base's loads). The preflight now asks the denoiser built without weights."""
    events: list = []
    with pytest.raises(ConfigError, match=refusal):
        train(make_config(family, output_name="targets", **settings), events.append, device="cpu")
    assert [e.type for e in events] == ["error"]  # nothing loaded, no phase started
    assert not (get_settings().outputs_dir / "targets").exists()


def test_block_targets_adapt_only_those_layers_for_each_adapter(make_config):
    block = "transformer_blocks.0.attn.to_q"
    for adapter in ADAPTERS:
        result = train(
            make_config(adapter=adapter, lora_targets=[block], lora_format="kohya", output_name=adapter),
            [].append,
            device="cpu",
        )
        modules = {k.split(".", 1)[0] for k in load_file(str(result.lora_path))}
        assert modules == {"lycoris_transformer_blocks_0_attn_to_q"}, modules
