"""diffusers' own `load_lora_weights` on every family's files meant for it, at the trained strength.

For every family and each file diffusers is meant to load (tests/families/test_contract.py covers
each family's default LoRA file the same way):
- `lora-diffusers`: a LoRA in the diffusers layout (alpha / rank folded into lora_B);
- `lora-kohya`: a LoRA in the family's kohya / ComfyUI layout (diffusers' kohya readers take the
  per-layer `.alpha`; FLUX.1's reader needs FLUX.1-dev's single-block widths, so the FLUX.1-layout
  families train the double blocks only: test_files.FLUX_DOUBLE_ONLY);
- `dora-diffusers`: a DoRA in the diffusers layout (peft's `lora_magnitude_vector`);
and bf16 / fp16 LoRA and DoRA files (DoRA's row magnitudes kept fp32). A 3-step tiny run (rank 4, alpha 8: a lost
alpha shows) writes the file; a fresh pipeline loads it with plain `load_lora_weights`; the
weight change of every loaded layer (peft's own merge of it minus its base) must equal the trained
one (peft's merge of the trained layer minus its base), on exactly the trained layers, and the
save-time check in the file's sidecar must call it loadable by diffusers. LoHa / LoKr files are
ComfyUI's (LyCORIS layout; diffusers has no loader for them): tests/external/test_comfyui_loader.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from bench.comfyui_check import trained_change
from safetensors.torch import load_file
from tests.unit.lora.test_files import FLUX_DOUBLE_ONLY

from lorastudio import families
from lorastudio.config import TrainConfig
from lorastudio.generate import load_pipeline
from lorastudio.lora import names
from lorastudio.settings import Settings
from lorastudio.training.loop import train

CASES: dict[str, dict[str, Any]] = {
    "lora-diffusers": {"lora_format": "diffusers"},
    "lora-kohya": {"lora_format": "kohya"},
    "dora-diffusers": {"adapter": "dora", "lora_format": "diffusers"},
}
# relative to the largest trained change of a layer, beyond the fp32 rounding of the weight: fp32
# files give peft's weights back exactly; a bf16 file rounds A and B to 8 significant bits, an
# fp16 file to 11
TOLERANCE = {"fp32": 1e-5, "bf16": 2e-2, "fp16": 3e-3}


@dataclass(frozen=True)
class Trained:
    """A run's LoRA file and its trained change ({diffusers weight name: merged - base}, by
    peft's merge of the trained layers: bench.comfyui_check.trained_change)."""

    lora_path: Path
    change: dict[str, torch.Tensor]


@pytest.fixture(scope="module")
def trained(tiny_model, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Trained]:
    """trained(family, **overrides) -> the Trained of `_run(family, ...)`, run once per module for
    each family and settings (the strength test reads the runs the loader tests made)."""
    done: dict[tuple, Trained] = {}

    def get(family: str, **overrides: Any) -> Trained:
        key = (family, *sorted((k, repr(v)) for k, v in overrides.items()))
        if key not in done:
            result = _run(family, tiny_model, tmp_path_factory.mktemp(f"run-{family}"), **overrides)
            done[key] = Trained(result.lora_path, trained_change(result.denoiser))
        return done[key]

    return get


def _run(family: str, tiny_model, root: Path, **overrides: Any) -> Any:
    """A 3-step CPU run of `family` with `overrides`, its adapter kept in memory."""
    spec = families.get(family).spec
    if spec.edit_model:
        from lorastudio.tiny.paired import make_paired_dataset

        data = make_paired_dataset(root / "paired")
        overrides = {"control_resolution": "target", **overrides}  # tiny controls
    else:
        from lorastudio.tiny import make_sample_dataset

        data = make_sample_dataset(root / "shapes")
    raw = {
        "family": family,
        "base_model": str(tiny_model(family)),
        "data_dir": str(data),
        "resolution": max(32, 2 * spec.resolution_multiple),
        "steps": 3,
        "learning_rate": 5e-2,
        "lora_rank": 4,
        "lora_alpha": 8.0,
        "batch_size": 2,
        "output_name": "run",
        "seed": 0,
        **({"max_sequence_length": 16} if "max_sequence_length" in spec.supports else {}),
        **overrides,
    }
    settings = Settings(home=root / "home")
    return train(
        TrainConfig.model_validate(raw), [].append, settings=settings, device="cpu", return_denoiser=True
    )


def _loaded_change(family: str, model: Path, lora: Path) -> dict[str, torch.Tensor]:
    """{diffusers weight name: merged - base} of every layer plain `load_lora_weights` put an
    adapter on, in a fresh pipeline of the tiny model (merged by peft, as trained_change does)."""
    pipe = load_pipeline(str(model), family, device="cpu")
    pipe.load_lora_weights(str(lora))  # plain diffusers
    from peft.tuners.tuners_utils import BaseTunerLayer

    denoiser = getattr(pipe, families.get(family).spec.denoiser)
    layers = {n: m for n, m in denoiser.named_modules() if isinstance(m, BaseTunerLayer)}
    adapters = {a for m in layers.values() for a in m.active_adapters}
    assert len(adapters) == 1, adapters  # the file's one adapter, on every layer it names
    change: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, module in layers.items():
            before = module.get_base_layer().weight.detach().float().clone()
            module.merge(adapter_names=list(adapters))
            change[f"{name}.weight"] = module.get_base_layer().weight.detach().float() - before
    return change


def _assert_loaded_at_the_trained_strength(
    family: str, result: Trained, model: Path, dtype: str
) -> list[str]:
    """Asserts the module docstring's rules on `result`'s file; returns the weights compared."""
    sidecar = json.loads(result.lora_path.with_suffix(".json").read_text())
    assert sidecar["loaders"]["diffusers"]["ok"], sidecar["loaders"]["diffusers"]
    want = result.change
    got = _loaded_change(family, model, result.lora_path)
    assert got.keys() == want.keys() and want
    base = dict(
        families.get(family).load_denoiser(str(model), None, torch.float32, torch.device("cpu")).state_dict()
    )
    moved = 0.0
    for key, change in want.items():
        scale = change.abs().max().item()
        rounding = 4 * torch.finfo(torch.float32).eps * base[key].abs().max().item()
        diff = (got[key] - change).abs().max().item()
        assert diff <= TOLERANCE[dtype] * scale + rounding, f"{key}: {diff:.3g} off a change of {scale:.3g}"
        moved = max(moved, scale)
    assert moved > 1e-3  # the run changed the layers (so the comparison can fail)
    return sorted(want)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("family", families.names())
def test_diffusers_loads_each_file_meant_for_it_at_the_trained_strength(family, case, tiny_model, trained):
    settings = dict(CASES[case])
    if case == "lora-kohya" and names.kohya_layout(family) == "flux":
        settings["lora_targets"] = FLUX_DOUBLE_ONLY
    result = trained(family, **settings)
    if case == "dora-diffusers":
        assert any(k.endswith(".lora_magnitude_vector") for k in load_file(str(result.lora_path)))
    _assert_loaded_at_the_trained_strength(family, result, tiny_model(family), "fp32")


@pytest.mark.parametrize(
    ("family", "adapter", "dtype"),
    [
        ("flux", "dora", "bf16"),
        ("flux", "lora", "bf16"),
        ("sdxl", "lora", "fp16"),
        ("qwen-image", "dora", "fp16"),
    ],
)
def test_a_half_precision_file_loads_at_the_trained_strength_within_its_rounding(
    family, adapter, dtype, tiny_model, trained
):
    result = trained(family, adapter=adapter, lora_format="diffusers", save_dtype=dtype)
    tensors = load_file(str(result.lora_path))
    magnitudes = {v.dtype for k, v in tensors.items() if k.endswith(".lora_magnitude_vector")}
    assert magnitudes == (
        {torch.float32} if adapter == "dora" else set()
    )  # kept fp32 (lora.files.FP32_PARTS)
    want = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    assert {v.dtype for k, v in tensors.items() if ".lora_" in k and k.endswith("weight")} == {want}
    _assert_loaded_at_the_trained_strength(family, result, tiny_model(family), dtype)


@pytest.mark.parametrize("case", list(CASES))
def test_sdxls_conv_layers_load_at_the_trained_strength(case, tiny_model, trained):
    """SDXL's ResNet conv1 (3x3 kernels) beside to_q, in each file diffusers is meant to load."""
    result = trained("sdxl", **CASES[case], lora_targets=["to_q", "conv1"])
    layers = _assert_loaded_at_the_trained_strength("sdxl", result, tiny_model("sdxl"), "fp32")
    assert any(w.endswith("conv1.weight") for w in layers)  # 3x3 convs among the compared layers


@pytest.mark.parametrize(
    ("family", "case"), [("flux", "lora-diffusers"), ("sdxl", "lora-kohya"), ("qwen-image", "lora-diffusers")]
)
def test_a_lora_at_strength_half_gives_half_the_trained_change(family, case, tiny_model, trained):
    """diffusers' adapter weight (set_adapters, what Generate's scale sets) scales a LoRA's change
    linearly: 0.5 gives half the trained change in every layer (alpha / rank applied once). A DoRA
    does not (peft normalises W + s * delta: 25 % off half in a tiny FLUX.1 run; ComfyUI
    interpolates, so there 0.5 is half): README's portability notes."""
    result = trained(family, **CASES[case])  # the run of test_diffusers_loads_each_file_meant_for_it
    want = result.change
    pipe = load_pipeline(str(tiny_model(family)), family, device="cpu")
    pipe.load_lora_weights(str(result.lora_path), adapter_name="at_half")
    pipe.set_adapters(["at_half"], [0.5])
    from peft.tuners.tuners_utils import BaseTunerLayer

    denoiser = getattr(pipe, families.get(family).spec.denoiser)
    compared = 0
    with torch.no_grad():
        for name, module in denoiser.named_modules():
            if not isinstance(module, BaseTunerLayer):
                continue
            before = module.get_base_layer().weight.detach().float().clone()
            module.merge(adapter_names=["at_half"])
            change = module.get_base_layer().weight.detach().float() - before
            full = want[f"{name}.weight"]
            rounding = 4 * torch.finfo(torch.float32).eps * before.abs().max().item()
            assert (change - 0.5 * full).abs().max().item() <= 1e-5 * full.abs().max().item() + rounding, name
            compared += 1
    assert compared == len(want) and max(w.abs().max().item() for w in want.values()) > 1e-3
