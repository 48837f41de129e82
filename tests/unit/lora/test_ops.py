"""`lorastudio lora merge` and `lorastudio lora resize` on files shaped like the tiny denoisers:
the merged file applies w_A * change_A + w_B * change_B exactly (and gives the image of both
LoRAs applied at those weights), the resized one the best rank-r approximation (truncated SVD);
both load in plain diffusers, in the inputs' layout."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from lorastudio import families
from lorastudio.errors import ConfigError
from lorastudio.generate import apply_loras, generate_image, load_pipeline
from lorastudio.lora.convert import PeftLora
from lorastudio.lora.file_read import read_lora_file
from lorastudio.lora.files import (
    detect_layout,
    file_for_layout,
    peft_from_file,
    write_lora_file,
)
from lorastudio.lora.ops import merge_files, resize_file


def _cli(*args: str):
    from lorastudio.cli.app import _register, app

    _register()
    return CliRunner().invoke(app, ["lora", *args])


def _lora(shapes: dict, family: str, rank: int, alpha: float, seed: int, every: int = 1) -> PeftLora:
    """A random LoRA on every `every`-th default target layer of the family (small weights)."""
    targets = families.get(family).spec.lora_targets
    names = [
        n for n, s in shapes.items() if len(s) == 2 and any(n == t or n.endswith("." + t) for t in targets)
    ]
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for n in names[::every]:
        out, inp = shapes[n]
        sd[f"{n}.lora_A.weight"] = 0.3 * torch.randn(rank, inp, generator=g)  # [r, in]
        sd[f"{n}.lora_B.weight"] = 0.3 * torch.randn(out, rank, generator=g)  # [out, r]
    return PeftLora(sd, rank, alpha)


def _write(lora: PeftLora, family: str, layout: str, path: Path, info: dict | None = None) -> Path:
    info = {"lorastudio.family": family, **(info or {})}
    tensors, header = file_for_layout(lora, family, layout, info)  # type: ignore[arg-type]
    return write_lora_file(path, tensors, header)


def _deltas(lora: PeftLora) -> dict[str, torch.Tensor]:
    modules = {k.rsplit(".lora_", 1)[0] for k in lora.tensors}
    return {
        m: lora.alpha / lora.rank * (lora.tensors[f"{m}.lora_B.weight"] @ lora.tensors[f"{m}.lora_A.weight"])
        for m in modules
    }


def _file_deltas(path: Path, family: str) -> dict[str, torch.Tensor]:
    tensors, header = read_lora_file(path)
    return _deltas(peft_from_file(tensors, header, family))


def _image(pipe, family: str) -> np.ndarray:
    extra = (
        {"max_sequence_length": 16} if "max_sequence_length" in families.get(family).spec.supports else None
    )
    img = generate_image(
        pipe, family, prompt="a red circle", seed=0, steps=2, width=32, height=32, extra=extra
    )
    return np.asarray(img, dtype=np.float32)


@pytest.mark.parametrize(("family", "layout"), [("flux", "diffusers"), ("sdxl", "kohya")])
def test_merge_applies_the_weighted_sum_of_the_changes(family, layout, layer_shapes, tmp_path):
    shapes = layer_shapes(family)
    a, b = _lora(shapes, family, 4, 16.0, seed=1), _lora(shapes, family, 2, 1.0, seed=2, every=2)
    path_a, path_b = (
        _write(a, family, layout, tmp_path / "a.safetensors"),
        _write(b, family, layout, tmp_path / "b.safetensors"),
    )
    out = _cli("merge", f"{path_a}:0.7", f"{path_b}:0.3", "--out", str(tmp_path / "m.safetensors"))
    assert out.exit_code == 0, out.output
    merged = tmp_path / "m.safetensors"
    tensors, header = read_lora_file(merged)
    assert detect_layout(tensors) == layout and header["lorastudio.rank"] == "6"
    da, db, dm = _deltas(a), _deltas(b), _file_deltas(merged, family)
    assert dm.keys() == da.keys() and set(db) < set(da)  # B trains every other layer only
    for m, delta in dm.items():
        expected = 0.7 * da[m] + (0.3 * db[m] if m in db else 0)
        torch.testing.assert_close(delta, expected, rtol=1e-5, atol=1e-6)


def test_the_merged_file_gives_the_image_of_both_loras_at_their_weights(layer_shapes, tiny_model, tmp_path):
    family, shapes = "flux", layer_shapes("flux")
    path_a = _write(_lora(shapes, family, 4, 16.0, seed=1), family, "diffusers", tmp_path / "a.safetensors")
    path_b = _write(
        _lora(shapes, family, 2, 1.0, seed=2, every=2), family, "diffusers", tmp_path / "b.safetensors"
    )
    merged = merge_files([(path_a, 0.7), (path_b, 0.3)], tmp_path / "m.safetensors")
    both = load_pipeline(str(tiny_model(family)), family, device="cpu")
    apply_loras(both, [(path_a, 0.7), (path_b, 0.3)])
    one = load_pipeline(str(tiny_model(family)), family, device="cpu")
    one.load_lora_weights(str(merged))  # plain diffusers
    base = _image(load_pipeline(str(tiny_model(family)), family, device="cpu"), family)
    expected = _image(both, family)
    assert np.abs(expected - base).mean() > 0.5
    assert np.abs(_image(one, family) - expected).max() <= 1.0


def test_resize_is_the_truncated_svd_and_exact_for_a_low_rank_change(layer_shapes, tiny_model, tmp_path):
    family, shapes = "flux", layer_shapes("flux")
    full = _lora(shapes, family, 8, 4.0, seed=3)
    src = _write(full, family, "diffusers", tmp_path / "r8.safetensors")
    out = _cli("resize", str(src), "--rank", "3", "--out", str(tmp_path / "r3.safetensors"))
    assert out.exit_code == 0, out.output
    assert "energy kept: worst layer" in out.output
    resized = _file_deltas(tmp_path / "r3.safetensors", family)
    for m, delta in _deltas(full).items():
        s = torch.linalg.svdvals(delta.double())
        error = torch.linalg.matrix_norm((resized[m] - delta).double())
        assert torch.linalg.matrix_rank(resized[m].double(), atol=1e-6) <= 3
        torch.testing.assert_close(error, s[3:].square().sum().sqrt(), rtol=1e-4, atol=1e-6)  # Eckart-Young

    # a rank-2 change stored at rank 8 resizes to rank 2 exactly
    g = torch.Generator().manual_seed(4)
    low = {}
    for k, v in full.tensors.items():
        if k.endswith(".lora_A.weight"):
            low[k] = torch.randn(8, 2, generator=g) @ torch.randn(
                2, v.shape[1], generator=g
            )  # [8, in], rank 2
        else:
            low[k] = v
    low_lora = PeftLora(low, 8, 4.0)
    resized2 = resize_file(
        _write(low_lora, family, "diffusers", tmp_path / "low.safetensors"), tmp_path / "low2.safetensors", 2
    )
    assert min(resized2.kept_energy.values()) == pytest.approx(1.0, abs=1e-9)
    for m, delta in _deltas(low_lora).items():
        torch.testing.assert_close(
            _file_deltas(tmp_path / "low2.safetensors", family)[m], delta, rtol=1e-4, atol=1e-5
        )
    pipe = load_pipeline(str(tiny_model(family)), family, device="cpu")
    pipe.load_lora_weights(str(tmp_path / "r3.safetensors"))  # loads in plain diffusers
    layers = [m for m in pipe.transformer.modules() if hasattr(m, "lora_A") and m.lora_A]
    assert len(layers) == len(resized) and all(
        m.lora_A[next(iter(m.lora_A))].weight.shape[0] == 3 for m in layers
    )


def test_bad_merge_and_resize_requests_are_refused(layer_shapes, tmp_path):
    flux = _write(
        _lora(layer_shapes("flux"), "flux", 4, 4.0, 1), "flux", "diffusers", tmp_path / "f.safetensors"
    )
    flux_k = _write(
        _lora(layer_shapes("flux"), "flux", 4, 4.0, 2), "flux", "kohya", tmp_path / "fk.safetensors"
    )
    qwen = _write(
        _lora(layer_shapes("qwen-image"), "qwen-image", 4, 4.0, 3),
        "qwen-image",
        "diffusers",
        tmp_path / "q.safetensors",
    )
    out = tmp_path / "out.safetensors"
    with pytest.raises(ConfigError, match="different families"):
        merge_files([(flux, 0.5), (qwen, 0.5)], out)
    with pytest.raises(ConfigError, match="different layouts"):
        merge_files([(flux, 0.5), (flux_k, 0.5)], out)
    with pytest.raises(ConfigError, match="at least two"):
        merge_files([(flux, 1.0)], out)
    with pytest.raises(ConfigError, match="between 1 and 3"):
        resize_file(flux, out, 4)
    with pytest.raises(ConfigError, match="another file"):
        resize_file(flux, flux, 2)
    assert not out.exists()


def test_a_bad_merge_weight_is_named_as_a_merge_weight(layer_shapes, tmp_path):
    """`lora merge A:nan B` was refused as "--lora ...: the scale must be a finite number" (the
    generate option's words); it names the merge's argument and its weight now."""
    src = _write(
        _lora(layer_shapes("flux"), "flux", 4, 4.0, 1), "flux", "diffusers", tmp_path / "f.safetensors"
    )
    for weight in ("nan", "inf", "-inf"):
        out = _cli("merge", f"{src}:{weight}", str(src), "--out", str(tmp_path / "m.safetensors"))
        said = str(out.exception) if out.exception else out.output
        assert out.exit_code != 0 and "LORAS" in said and "the weight must be a finite number" in said, said
        assert "--lora" not in said and "scale" not in said
    assert not (tmp_path / "m.safetensors").exists()


@pytest.mark.parametrize("layout", ["kohya", "diffusers"])
def test_merge_and_resize_keep_an_sdxl_loras_text_encoder_layers(layout, layer_shapes, tmp_path):
    """A LoRA of `train_text_encoder` (or kohya's SDXL LoRA with lora_te1_ / lora_te2_ keys):
    merge and resize carry both encoders' layers at their strength, in the input's layout (they
    were refused: "'lora_te2_...' is not a sdxl kohya/ComfyUI key", "keys not of a sdxl denoiser")."""
    from lorastudio.lora.text_encoder_files import with_text_encoders
    from lorastudio.lora.text_encoders import split_text_encoders

    te_layers = {
        "text_encoder.text_model.encoder.layers.0.self_attn.q_proj": 32,
        "text_encoder_2.text_model.encoder.layers.0.self_attn.out_proj": 64,
    }

    def with_te(lora: PeftLora, seed: int, path: Path) -> tuple[Path, dict[str, torch.Tensor]]:
        g = torch.Generator().manual_seed(seed)
        te = {}
        for m, n in te_layers.items():
            te[m + ".lora_A.weight"] = 0.3 * torch.randn(lora.rank, n, generator=g)  # [r, in]
            te[m + ".lora_B.weight"] = 0.3 * torch.randn(n, lora.rank, generator=g)  # [out, r]
        tensors, header = file_for_layout(lora, "sdxl", layout, {"lorastudio.family": "sdxl"})  # type: ignore[arg-type]
        scaled = {
            k: v * (lora.alpha / lora.rank) if k.endswith("lora_B.weight") else v for k, v in te.items()
        }
        tensors, header = with_text_encoders(scaled, layout, tensors, header)  # type: ignore[arg-type]
        deltas = {m: scaled[m + ".lora_B.weight"] @ scaled[m + ".lora_A.weight"] for m in te_layers}
        return write_lora_file(path, tensors, header), deltas

    def te_deltas(path: Path) -> dict[str, torch.Tensor]:
        from lorastudio.lora.text_encoders import folded_peft

        tensors, _ = read_lora_file(path)
        _, te = split_text_encoders(tensors)
        assert te, f"{path.name} lost its text-encoder layers"
        peft = folded_peft(te)
        return {m: peft[m + ".lora_B.weight"] @ peft[m + ".lora_A.weight"] for m in te_layers}

    shapes = layer_shapes("sdxl")
    a, b = _lora(shapes, "sdxl", 4, 8.0, seed=1), _lora(shapes, "sdxl", 2, 1.0, seed=2, every=2)
    path_a, te_a = with_te(a, 5, tmp_path / "a.safetensors")
    path_b, te_b = with_te(b, 6, tmp_path / "b.safetensors")
    merged = merge_files([(path_a, 0.7), (path_b, 0.3)], tmp_path / "m.safetensors")
    tensors, _ = read_lora_file(merged)
    assert detect_layout(tensors) == layout
    got = te_deltas(merged)
    for m in te_layers:
        torch.testing.assert_close(got[m], 0.7 * te_a[m] + 0.3 * te_b[m], rtol=1e-5, atol=1e-6)
    dm, da, db = _file_deltas_split(merged), _deltas(a), _deltas(b)
    for m, delta in da.items():
        torch.testing.assert_close(dm[m], 0.7 * delta + (0.3 * db[m] if m in db else 0), rtol=1e-5, atol=1e-6)

    resize_file(path_a, tmp_path / "r2.safetensors", 2)
    for m, delta in te_deltas(tmp_path / "r2.safetensors").items():
        s = torch.linalg.svdvals(te_a[m].double())
        error = torch.linalg.matrix_norm((delta - te_a[m]).double())
        torch.testing.assert_close(error, s[2:].square().sum().sqrt(), rtol=1e-4, atol=1e-6)  # Eckart-Young


def _file_deltas_split(path: Path) -> dict[str, torch.Tensor]:
    """The denoiser's weight changes of an SDXL file that also holds text-encoder layers."""
    from lorastudio.lora.text_encoders import split_text_encoders

    tensors, header = read_lora_file(path)
    denoiser, _ = split_text_encoders(tensors)
    return _deltas(peft_from_file(denoiser, header, "sdxl"))


def test_a_diffusers_written_sdxl_loras_text_encoder_alpha_is_kept(layer_shapes, tmp_path):
    """A file of diffusers' own `save_lora_weights` (the diffusers training scripts, SimpleTuner)
    whose text encoders' adapter config has lora_alpha != r: convert, merge and resize apply each
    encoder's layers at alpha / r (peft's scale, as diffusers' loader does), not at 1."""
    from diffusers import StableDiffusionXLPipeline
    from peft import LoraConfig

    from lorastudio.lora.files import convert_file
    from lorastudio.lora.text_encoders import folded_peft, split_text_encoders

    unet = _lora(layer_shapes("sdxl"), "sdxl", 4, 4.0, seed=1, every=4)
    g = torch.Generator().manual_seed(7)
    te = {  # peft's names inside the encoder, [r, in] / [out, r]
        "text_encoder": {"text_model.encoder.layers.0.self_attn.q_proj": 32},
        "text_encoder_2": {"text_model.encoder.layers.0.self_attn.out_proj": 64},
    }
    layers = {
        enc: {
            f"{m}.lora_{ab}.weight": torch.randn((4, n) if ab == "A" else (n, 4), generator=g)
            for m, n in mods.items()
            for ab in "AB"
        }
        for enc, mods in te.items()
    }
    alphas = {"text_encoder": 16.0, "text_encoder_2": 2.0}  # scales 4 and 0.5
    meta = {
        enc: LoraConfig(r=4, lora_alpha=alphas[enc], target_modules=["q_proj", "out_proj"]).to_dict()
        for enc in te
    }
    for config in meta.values():
        config["target_modules"] = sorted(config["target_modules"])
    StableDiffusionXLPipeline.save_lora_weights(
        tmp_path,
        unet_lora_layers=unet.tensors,
        text_encoder_lora_layers=layers["text_encoder"],
        text_encoder_2_lora_layers=layers["text_encoder_2"],
        unet_lora_adapter_metadata=LoraConfig(r=4, lora_alpha=4.0, target_modules=["to_q"]).to_dict(),
        text_encoder_lora_adapter_metadata=meta["text_encoder"],
        text_encoder_2_lora_adapter_metadata=meta["text_encoder_2"],
        weight_name="theirs.safetensors",
    )
    src = tmp_path / "theirs.safetensors"
    want = {
        f"{enc}.{m}": alphas[enc] / 4 * layers[enc][f"{m}.lora_B.weight"] @ layers[enc][f"{m}.lora_A.weight"]
        for enc, mods in te.items()
        for m in mods
    }

    def te_deltas(path: Path) -> dict[str, torch.Tensor]:
        tensors, header = read_lora_file(path)
        peft = folded_peft(split_text_encoders(tensors)[1], header)
        return {m: peft[m + ".lora_B.weight"] @ peft[m + ".lora_A.weight"] for m in want}

    for name, got in {
        "read": te_deltas(src),
        "convert": (
            convert_file(src, tmp_path / "k.safetensors", "kohya", "sdxl"),
            te_deltas(tmp_path / "k.safetensors"),
        )[1],
        "merge": (
            merge_files([(src, 0.5), (src, 0.5)], tmp_path / "m.safetensors", "sdxl"),
            te_deltas(tmp_path / "m.safetensors"),
        )[1],
    }.items():
        for m, delta in want.items():
            torch.testing.assert_close(got[m], delta, rtol=1e-5, atol=1e-5, msg=f"{name}: {m}")


def test_convert_merge_and_resize_name_the_base_not_its_path(layer_shapes, tmp_path):
    """A file whose header holds its trainer's local path (a file of an earlier version) keeps
    no path in what convert, merge and resize write: the model's name (lora/metadata.model_name)."""
    from lorastudio.lora.files import convert_file

    shapes = layer_shapes("flux")
    where = {"lorastudio.base_model": "/home/alice/models/flux1-dev"}
    a = _write(
        _lora(shapes, "flux", 4, 4.0, 0, every=4), "flux", "diffusers", tmp_path / "a.safetensors", where
    )
    b = _write(
        _lora(shapes, "flux", 4, 4.0, 1, every=4), "flux", "diffusers", tmp_path / "b.safetensors", where
    )
    convert_file(a, tmp_path / "c.safetensors", to="kohya")
    merge_files([(a, 1.0), (b, 0.5)], tmp_path / "m.safetensors")
    resize_file(a, tmp_path / "r.safetensors", 2)
    for made in ("c", "m", "r"):
        _, header = read_lora_file(tmp_path / f"{made}.safetensors")
        assert header["lorastudio.base_model"] == "flux1-dev", made
        assert not any("/home/alice" in v for v in header.values()), made


def test_a_merged_file_claims_only_the_facts_its_inputs_share(layer_shapes, tmp_path):
    """The merged file's lorastudio.* header keeps what every input says alike (family, base) and
    leaves out what differs (steps, learning rate, EMA, optimizer: no input's alone describes the
    merge); it was the first input's."""
    shapes = layer_shapes("flux")
    shared = {"lorastudio.base_model": "flux1-dev", "lorastudio.optimizer": "adamw"}
    a = _write(
        _lora(shapes, "flux", 4, 4.0, 0, every=4),
        "flux",
        "diffusers",
        tmp_path / "a.safetensors",
        {**shared, "lorastudio.steps": "500", "lorastudio.learning_rate": "0.0001", "lorastudio.ema": "ema"},
    )
    b = _write(
        _lora(shapes, "flux", 4, 4.0, 1, every=4),
        "flux",
        "diffusers",
        tmp_path / "b.safetensors",
        {**shared, "lorastudio.steps": "2000", "lorastudio.learning_rate": "0.0004"},
    )
    merge_files([(a, 1.0), (b, 0.5)], tmp_path / "m.safetensors")
    _, header = read_lora_file(tmp_path / "m.safetensors")
    assert header["lorastudio.base_model"] == "flux1-dev" and header["lorastudio.optimizer"] == "adamw"
    assert header["lorastudio.family"] == "flux"
    for differs in ("lorastudio.steps", "lorastudio.learning_rate", "lorastudio.ema"):
        assert differs not in header, differs
    assert "a.safetensors" in header["lorastudio.merged_from"]
