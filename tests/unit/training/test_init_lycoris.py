"""A run started from a LyCORIS-layout DoRA file (`.dora_scale`) and from kohya-named LyCORIS files
whose layers are FLUX.1's fused checkpoint linears (training/init_lycoris.py, init_lycoris_rows.py):
the adapter holds the file exactly (the saved LoRA equals the file; each adapted layer equals
generation's merge of the file at strength 1), and a fused LoKr whose Kronecker blocks straddle
the layers is refused naming why."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from lorastudio import families
from lorastudio.errors import ModelSourceError
from lorastudio.training.init_lora import InitSource, load_init_lora
from lorastudio.training.init_lora_rules import file_sha256
from lorastudio.training.loop import train

TINY_LR = 1e-12  # a step that moves no fp32 weight of the file's size


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], rtol: float = 1e-5) -> None:
    assert a.keys() == b.keys() and a
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=rtol, atol=1e-7, msg=key)


def _same_as_generation(make_config, tiny_model, path: Path, adapter: str, **options: object) -> int:
    """Load `path` into a fresh adapter of `adapter` on the tiny FLUX.1 denoiser and compare each
    adapted layer's output with the layer generation patches with the file at strength 1.
    Returns the layers compared."""
    from lorastudio.generate.pipeline import apply_loras, load_pipeline
    from lorastudio.training.lora import add_lora, lora_config_for, module_scales

    family = families.get("flux")
    denoiser = family.load_denoiser(str(tiny_model("flux")), None, torch.float32, torch.device("cpu"))
    cfg = make_config(adapter=adapter, lora_alpha=8.0, **options)
    add_lora(denoiser, lora_config_for(cfg, family.spec.lora_targets))
    load = load_init_lora(denoiser, InitSource(path, file_sha256(path)), "flux", adapter)
    pipe = load_pipeline(str(tiny_model("flux")), "flux", dtype=torch.float32, device="cpu")
    apply_loras(pipe, [(path, 1.0)])
    theirs = dict(pipe.transformer.named_modules())
    g = torch.Generator().manual_seed(0)
    checked = 0
    adapted = module_scales(denoiser)
    for name, module in denoiser.named_modules():
        if name in adapted and name not in load.fresh:
            x = torch.randn(3, module.in_features, generator=g)  # [3, in]
            torch.testing.assert_close(module(x), theirs[name](x), rtol=1e-5, atol=1e-6, msg=name)
            checked += 1
    assert checked == load.loaded and checked > 0
    return checked


def _qkv_names(block: int) -> str:
    return f"lora_unet_double_blocks_{block}_img_attn_qkv"


def _inner(tiny_model) -> int:
    denoiser = families.get("flux").load_denoiser(
        str(tiny_model("flux")), None, torch.float32, torch.device("cpu")
    )
    return int(denoiser.transformer_blocks[0].attn.to_q.weight.shape[0])


def _fused_file(tmp_path: Path, layers: dict[str, dict[str, torch.Tensor]], name: str) -> Path:
    path = tmp_path / f"{name}.safetensors"
    tensors = {f"{layer}.{k}": v.contiguous() for layer, parts in layers.items() for k, v in parts.items()}
    save_file(tensors, str(path), metadata={"ss_network_dim": "4"})
    return path


@pytest.mark.parametrize("kind", ["loha", "dora"])
def test_a_fused_kohya_layer_is_cut_into_its_layers_exactly(make_config, tiny_model, tmp_path, kind):
    """FLUX.1's img_attn.qkv under kohya's name (one layer of q, k, v): before, refused ("patch
    several layers"); now each part holds its rows of the layer's change."""
    d, r = _inner(tiny_model), 4
    g = torch.Generator().manual_seed(1)
    if kind == "loha":
        parts = {"hada_w1_a": torch.randn(3 * d, r, generator=g), "hada_w1_b": torch.randn(r, d, generator=g),
                 "hada_w2_a": torch.randn(3 * d, r, generator=g), "hada_w2_b": torch.randn(r, d, generator=g)}  # fmt: skip
    else:
        parts = {"lora_up.weight": torch.randn(3 * d, r, generator=g) * 0.1, "lora_down.weight": torch.randn(r, d, generator=g),
                 "dora_scale": 1 + 0.1 * torch.rand(3 * d, 1, generator=g)}  # fmt: skip
    parts = {k: v * 0.1 for k, v in parts.items()} | {"alpha": torch.tensor(2.0)}
    path = _fused_file(tmp_path, {_qkv_names(0): parts}, f"fused-{kind}")
    assert _same_as_generation(make_config, tiny_model, path, kind, lora_rank=r) == 3  # to_q, to_k, to_v
    if kind == "loha":  # a run from it (rank and alpha from the file) saves the same change per layer
        cfg = make_config(steps=1, learning_rate=TINY_LR, lora_rank=None, adapter=kind, init_lora=str(path),
                          lora_targets=["to_q", "to_k", "to_v"], output_name="from-fused")  # fmt: skip
        saved = train(cfg, [].append, device="cpu").lora_path
        layers = {k.split(".")[0] for k in load_file(str(saved))}
        assert {
            f"lycoris_transformer_blocks_0_attn_{n}" for n in ("to_q", "to_k", "to_v")
        } <= layers  # per layer
        theirs, ours = _merged(tiny_model, path), _merged(tiny_model, saved)
        assert ours.keys() == theirs.keys()
        for key in ours:  # the fused layer's parts as the file patches them, every other weight as it was
            torch.testing.assert_close(ours[key], theirs[key], rtol=1e-5, atol=1e-7, msg=key)


def _merged(tiny_model, path: Path) -> dict[str, torch.Tensor]:
    """The tiny FLUX.1 denoiser's weights as generation patches them with `path` at strength 1."""
    from lorastudio.generate.pipeline import apply_loras, load_pipeline

    pipe = load_pipeline(str(tiny_model("flux")), "flux", dtype=torch.float32, device="cpu")
    apply_loras(pipe, [(path, 1.0)])
    return {k: v.detach().clone() for k, v in pipe.transformer.state_dict().items()}


def test_a_fused_lokr_loads_where_its_blocks_fall_within_the_layers_else_is_refused(
    make_config, tiny_model, tmp_path
):
    d, r = _inner(tiny_model), 4
    g = torch.Generator().manual_seed(2)
    # w2 of d / 2 rows: each layer of d rows is two of w1's rows (the run's lokr_factor 2: w1 [2, 2])
    fits = {"lokr_w1": torch.randn(6, 2, generator=g), "lokr_w2_a": torch.randn(d // 2, r, generator=g) * 0.1,
            "lokr_w2_b": torch.randn(r, d // 2, generator=g) * 0.1, "alpha": torch.tensor(4.0)}  # fmt: skip
    path = _fused_file(tmp_path, {_qkv_names(0): fits}, "fused-lokr")
    assert _same_as_generation(make_config, tiny_model, path, "lokr", lora_rank=r, lokr_factor=2) == 3
    # w2 of 3d / 2 rows: the layers' boundaries at d and 2d cut through its blocks
    straddles = {"lokr_w1": torch.randn(2, 2, generator=g), "lokr_w2_a": torch.randn(3 * d // 2, r, generator=g),
                 "lokr_w2_b": torch.randn(r, d // 2, generator=g)}  # fmt: skip
    bad = _fused_file(tmp_path, {_qkv_names(0): straddles}, "fused-lokr-bad")
    family = families.get("flux")
    from lorastudio.training.lora import add_lora, lora_config_for

    denoiser = family.load_denoiser(str(tiny_model("flux")), None, torch.float32, torch.device("cpu"))
    add_lora(
        denoiser,
        lora_config_for(
            make_config(adapter="lokr", lora_rank=r, lora_alpha=8.0, lokr_factor=2), family.spec.lora_targets
        ),
    )
    with pytest.raises(ModelSourceError, match="cut through them: no LoKr of the layer's factors"):
        load_init_lora(denoiser, InitSource(bad, file_sha256(bad)), "flux", "lokr")


def test_an_input_axis_dora_scale_is_refused_naming_why(make_config, tiny_model, tmp_path):
    """LyCORIS' wd_on_output = false writes a [1, in] dora_scale, which peft's DoRA cannot hold."""
    d, r = _inner(tiny_model), 4
    layer = "lora_unet_double_blocks_0_img_attn_proj"
    parts = {
        "lora_up.weight": torch.zeros(d, r),
        "lora_down.weight": torch.ones(r, d),
        "dora_scale": torch.ones(1, d),
    }
    path = _fused_file(tmp_path, {layer: parts}, "dora-input-axis")
    family = families.get("flux")
    from lorastudio.training.lora import add_lora, lora_config_for

    denoiser = family.load_denoiser(str(tiny_model("flux")), None, torch.float32, torch.device("cpu"))
    add_lora(
        denoiser,
        lora_config_for(make_config(adapter="dora", lora_rank=r, lora_alpha=8.0), family.spec.lora_targets),
    )
    with pytest.raises(ModelSourceError, match="magnitude per output row only"):
        load_init_lora(denoiser, InitSource(path, file_sha256(path)), "flux", "dora")


@pytest.mark.parametrize("dora_scale", [1.0, 3e38])
def test_a_dora_file_whose_change_overflows_is_refused_not_loaded_as_nan(
    make_config, tiny_model, tmp_path, dora_scale
):
    """RELIABILITY 1542: finite lora_up / lora_down (1e20 each: every value passes check_finite)
    whose product is past float32, or a finite dora_scale (3e38) times its norm ratio past it: the
    magnitude was loaded as inf / NaN and the run diverged on its first steps, blamed on its
    learning rate. Now refused naming the layer, before anything is copied."""
    d, r = _inner(tiny_model), 4
    big = 1e20 if dora_scale == 1.0 else 1.0
    parts = {
        "lora_up.weight": torch.full((d, r), big),
        "lora_down.weight": torch.full((r, d), big),
        "dora_scale": torch.full((d, 1), dora_scale),
    }
    path = _fused_file(tmp_path, {"lora_unet_double_blocks_0_img_attn_proj": parts}, "dora-overflow")
    family = families.get("flux")
    from lorastudio.training.lora import add_lora, lora_config_for

    denoiser = family.load_denoiser(str(tiny_model("flux")), None, torch.float32, torch.device("cpu"))
    add_lora(
        denoiser,
        lora_config_for(make_config(adapter="dora", lora_rank=r, lora_alpha=8.0), family.spec.lora_targets),
    )
    with pytest.raises(ModelSourceError, match="attn.to_out.0's change .* past what float32 holds"):
        load_init_lora(denoiser, InitSource(path, file_sha256(path)), "flux", "dora")
    assert all(bool(torch.isfinite(p).all()) for p in denoiser.parameters())


def test_a_lycoris_layout_dora_file_starts_a_dora_run(make_config, tiny_model):
    """A DoRA run's kohya-format file (lycoris_ layers with ComfyUI's dora_scale): before, refused
    ("does not read in this version"); now its magnitudes come from the dora_scale and the base."""
    first = train(
        make_config(steps=1, lora_alpha=8.0, output_name="dora-k", adapter="dora", lora_format="kohya"),
        [].append,
        device="cpu",
    ).lora_path
    assert any(k.endswith(".dora_scale") for k in load_file(str(first)))
    cfg = make_config(
        steps=1, learning_rate=TINY_LR, lora_rank=None, output_name="dora-k-again", init_lora=str(first),
        adapter="dora", lora_format="kohya",
    )  # fmt: skip
    again = train(cfg, [].append, device="cpu")
    _close(load_file(str(first)), load_file(str(again.lora_path)))
    _same_as_generation(make_config, tiny_model, first, "dora")


def test_an_aitoolkit_lokr_file_under_diffusers_names_starts_a_lokr_run(make_config, tiny_model, tmp_path):
    """ai-toolkit's peft-format LoKr (`transformer.<diffusers module>.lokr_w1 / lokr_w2_a /
    lokr_w2_b / alpha`, alpha = its rank) was refused as layers of no such model; now each layer
    loads into the run's LoKr exactly as generation patches it (RELIABILITY 2240)."""
    d, r = _inner(tiny_model), 4
    g = torch.Generator().manual_seed(5)
    tensors = {}
    for module in ("transformer_blocks.0.attn.to_q", "transformer_blocks.0.attn.to_k"):
        tensors |= {
            f"transformer.{module}.lokr_w1": torch.randn(2, 2, generator=g),
            f"transformer.{module}.lokr_w2_a": 0.1 * torch.randn(d // 2, r, generator=g),
            f"transformer.{module}.lokr_w2_b": 0.1 * torch.randn(r, d // 2, generator=g),
            f"transformer.{module}.alpha": torch.tensor(float(r)),
        }
    path = tmp_path / "aitoolkit-lokr.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt"})
    assert _same_as_generation(make_config, tiny_model, path, "lokr", lora_rank=r, lokr_factor=2) == 2
