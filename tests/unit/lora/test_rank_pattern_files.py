"""`lorastudio lora convert / merge / resize` on a LoRA of several ranks and alphas (a run with
rank_pattern / alpha_pattern, or another trainer's diffusers file recording them in its adapter
config): each output loads in plain diffusers' load_lora_weights and applies the weight change
the input applies there (peft's own per-module scaling is the reference). Before, the readers
took one rank and alpha for every layer and the writers recorded one rank: a converted or merged
file failed to load ("size mismatch for ...to_k.lora_A"), and an alpha_pattern was dropped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

from lorastudio import families
from lorastudio.cli.app import _register, app
from lorastudio.generate import load_pipeline
from lorastudio.lora.files import ADAPTER_METADATA_KEY


def _patterned_file(shapes: dict, path: Path) -> Path:
    """A diffusers FLUX.1 LoRA: rank 4 / alpha 8, to_k at rank 2, to_q at alpha 2 (peft scales:
    2, 4 and 0.5), its patterns recorded in the adapter config as diffusers and peft write it."""
    targets = families.get("flux").spec.lora_targets
    names = [n for n, s in shapes.items() if len(s) == 2 and any(n.endswith("." + t) for t in targets)]
    g = torch.Generator().manual_seed(7)
    tensors, ranks = {}, {}
    for n in names:
        out, inp = shapes[n]
        rank = 2 if n.endswith("to_k") else 4
        ranks[n] = rank
        tensors[f"transformer.{n}.lora_A.weight"] = 0.3 * torch.randn(rank, inp, generator=g)  # [r, in]
        tensors[f"transformer.{n}.lora_B.weight"] = 0.3 * torch.randn(out, rank, generator=g)  # [out, r]
    config = {
        "r": 4,
        "lora_alpha": 8.0,
        "rank_pattern": {"to_k": 2},
        "alpha_pattern": {"to_q": 2.0},
        "target_modules": sorted(names),
    }
    meta = {ADAPTER_METADATA_KEY: json.dumps({f"transformer.{k}": v for k, v in config.items()})}
    save_file(tensors, str(path), metadata={**meta, "format": "pt", "lorastudio.family": "flux"})
    return path


def _deltas(tiny_model, path: Path) -> dict[str, torch.Tensor]:
    """{module: scaling * B @ A} of every LoRA layer, as diffusers' loader and peft apply `path`."""
    pipe = load_pipeline(str(tiny_model("flux")), "flux", device="cpu")
    pipe.load_lora_weights(str(path), adapter_name="x")
    found = {}
    for name, module in pipe.transformer.named_modules():
        if hasattr(module, "lora_A") and "x" in module.lora_A:
            b, a = module.lora_B["x"].weight, module.lora_A["x"].weight  # [out, r], [r, in]
            found[name] = module.scaling["x"] * (b @ a)
    assert found
    return found


def _cli(*args: str):
    _register()
    return CliRunner().invoke(app, ["lora", *args])


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_convert_merge_and_resize_keep_every_layers_own_strength(layer_shapes, tiny_model, tmp_path):
    src = _patterned_file(layer_shapes("flux"), tmp_path / "src.safetensors")
    want = _deltas(tiny_model, src)
    scales = {m.rsplit(".", 1)[1]: round(float(d.norm()), 3) for m, d in want.items()}
    assert len(set(scales)) > 1  # the reference really has several ranks and alphas

    converted = tmp_path / "conv.safetensors"
    assert _cli("convert", str(src), str(converted), "--to", "diffusers").exit_code == 0
    for m, d in _deltas(tiny_model, converted).items():
        torch.testing.assert_close(d, want[m], rtol=1e-5, atol=1e-6)

    merged = tmp_path / "merged.safetensors"
    out = _cli("merge", f"{src}:0.25", f"{converted}:0.75", "--out", str(merged))
    assert out.exit_code == 0, out.output
    for m, d in _deltas(tiny_model, merged).items():
        torch.testing.assert_close(d, want[m], rtol=1e-5, atol=1e-6)

    resized = tmp_path / "resized.safetensors"
    out = _cli("resize", str(src), "--rank", "2", "--out", str(resized))
    assert out.exit_code == 0, out.output
    got = _deltas(tiny_model, resized)
    for m, d in want.items():
        s = torch.linalg.svdvals(d.double())
        error = torch.linalg.matrix_norm((got[m] - d).double())
        torch.testing.assert_close(error, s[2:].square().sum().sqrt(), rtol=1e-4, atol=1e-5)  # Eckart-Young


def test_a_file_whose_adapter_config_contradicts_its_tensors_is_refused(layer_shapes, tmp_path):
    src = _patterned_file(layer_shapes("flux"), tmp_path / "src.safetensors")
    from safetensors import safe_open

    with safe_open(str(src), "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
        meta = dict(f.metadata())
    config = json.loads(meta[ADAPTER_METADATA_KEY])
    config["transformer.rank_pattern"] = {}  # to_k's tensors are rank 2, the config now says 4
    meta[ADAPTER_METADATA_KEY] = json.dumps(config)
    bad = tmp_path / "bad.safetensors"
    save_file(tensors, str(bad), metadata=meta)
    out = _cli("convert", str(bad), str(tmp_path / "o.safetensors"), "--to", "diffusers")
    assert out.exit_code != 0 and not (tmp_path / "o.safetensors").exists()
    assert "to_k" in str(out.exception) and "rank 2" in str(out.exception) and "says 4" in str(out.exception)
