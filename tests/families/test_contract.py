"""The family contract: every registered family trains, and its LoRA file round-trips.

Parametrized over families.names(), so a new family is tested with no new test code. One
overfitting run per family (4 images, rank != alpha) feeds every test of that family.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import diffusers
import numpy as np
import pytest
import torch
from tests.families.conftest import controls_for

from lorastudio import families
from lorastudio.config import parse_train_config
from lorastudio.generate import apply_loras, generate_image, load_pipeline
from lorastudio.settings import Settings
from lorastudio.training.loop import TrainResult, train

RANK, ALPHA = 4, 8.0
STEPS = 40

_trained: dict[str, TrainResult] = {}


def _resolution(family: str) -> int:
    return max(32, 2 * families.get(family).spec.resolution_multiple)


def _extra(family: str) -> dict[str, Any] | None:
    return (
        {"max_sequence_length": 16} if "max_sequence_length" in families.get(family).spec.supports else None
    )


def _control_size(data: Path) -> dict[str, Any]:
    """The run's control_resolution: "target" on a paired dataset (the pipelines' ~1 MP controls
    would dwarf the 32 px targets; the rules: tests/unit/training/test_control_resolution)."""
    return {"control_resolution": "target"} if (data / "control").is_dir() else {}


@pytest.fixture
def trained(request, tiny_model, training_data, tmp_path_factory) -> TrainResult:
    """The overfitting run of the test's family (trained once per session)."""
    family = request.node.callspec.params["family"]
    if family not in _trained:
        raw = {
            "family": family,
            "base_model": str(tiny_model(family)),
            "data_dir": str(training_data(family)),
            "output_name": f"contract-{family}",
            "resolution": _resolution(family),
            "steps": STEPS,
            "batch_size": 4,
            "learning_rate": 1e-2,
            "lora_rank": RANK,
            "lora_alpha": ALPHA,
            "seed": 0,
            **(_extra(family) or {}),
            **_control_size(training_data(family)),
        }
        settings = Settings(home=tmp_path_factory.mktemp(f"contract-{family}"))
        _trained[family] = train(
            parse_train_config(raw), [].append, settings=settings, device="cpu", return_denoiser=True
        )
    return _trained[family]


def _image(pipe: Any, family: str, data: Path) -> np.ndarray:
    """The 2-step image of the first sample's caption (and its control images, if any)."""
    caption = sorted(data.glob("*.txt"))[0]
    size = _resolution(family)
    image = generate_image(
        pipe,
        family,
        prompt=caption.read_text().strip(),
        seed=0,
        steps=2,
        width=size,
        height=size,
        extra=_extra(family),
        controls=controls_for(family, data, caption),
    )
    return np.asarray(image, dtype=np.float32)


@pytest.mark.parametrize("family", families.names())
def test_loss_falls_when_overfitting(family, trained):
    first, last = np.mean(trained.losses[:10]), np.mean(trained.losses[-10:])
    assert np.isfinite(trained.losses).all()
    assert last < first, f"{family}: mean loss {first:.4f} (first 10 steps) -> {last:.4f} (last 10)"


@pytest.mark.parametrize("family", families.names())
def test_lora_changes_the_image_and_the_file_reloads_exactly(family, trained, tiny_model, training_data):
    spec = families.get(family).spec
    data = training_data(family)
    pipe = load_pipeline(str(tiny_model(family)), family, device="cpu")
    base = _image(pipe, family, data)
    setattr(pipe, spec.denoiser, trained.denoiser)  # the adapter as trained, in memory
    in_memory = _image(pipe, family, data)
    fresh = load_pipeline(str(tiny_model(family)), family, device="cpu")
    apply_loras(fresh, [(trained.lora_path, 1.0)])
    from_file = _image(fresh, family, data)
    assert np.abs(in_memory - base).mean() > 0.5  # out of 255: the LoRA visibly changes the image
    assert np.abs(from_file - in_memory).max() <= 1.0  # rounding to 8 bits at most


@pytest.mark.parametrize("family", families.names())
def test_plain_diffusers_loads_the_file_at_the_trained_strength(family, trained, tiny_model):
    spec = families.get(family).spec
    pipeline_cls = getattr(diffusers, spec.pipeline_class)
    pipe = pipeline_cls.from_pretrained(str(tiny_model(family)))
    pipe.load_lora_weights(str(trained.lora_path.parent), weight_name=trained.lora_path.name)
    denoiser = getattr(pipe, spec.denoiser)
    loaded = {n: m for n, m in denoiser.named_modules() if hasattr(m, "lora_A") and m.lora_A}
    trained_layers = {n: m for n, m in trained.denoiser.named_modules() if hasattr(m, "lora_A") and m.lora_A}
    assert loaded.keys() == trained_layers.keys() and loaded
    for name, module in loaded.items():
        # alpha != rank survives the file: the default layouts keep it as kohya `.alpha` tensors
        # (SDXL) or folded into lora_B (diffusers layout, alpha = rank), so the weight diffusers
        # adds is the trained (alpha / rank) * B @ A either way
        (adapter,) = module.scaling
        reference = trained_layers[name]
        a, b = module.lora_A[adapter].weight.flatten(1), module.lora_B[adapter].weight.flatten(1)
        a0, b0 = reference.lora_A["default"].weight.flatten(1), reference.lora_B["default"].weight.flatten(1)
        torch.testing.assert_close(module.scaling[adapter] * (b @ a), ALPHA / RANK * (b0 @ a0))


@pytest.mark.parametrize("family", families.names())
def test_the_kohya_layout_passes_comfyuis_key_check_and_converts_back_exactly(family, trained):
    """The trained layers in the family's kohya / ComfyUI layout: every key is one ComfyUI's
    LoRA loader consumes for this model, with the shape of the weight it patches; converting
    back gives the same layers with the same weight change (alpha / rank) * B @ A."""
    from lorastudio.lora.comfy import check_comfy_keys, comfy_key_map
    from lorastudio.lora.convert import to_kohya
    from lorastudio.lora.convert_read import to_diffusers
    from lorastudio.training.adapters.export import base_weight_shapes
    from lorastudio.training.adapters.lora import lora_state_dict

    peft = lora_state_dict(trained.denoiser)
    kohya = to_kohya(peft, family, ALPHA)
    key_map = comfy_key_map(family, base_weight_shapes(trained.denoiser))
    check = check_comfy_keys({k: tuple(v.shape) for k, v in kohya.items()}, key_map)
    assert check.ok and kohya, (check.unconsumed[:3], check.mismatched[:3])
    back = to_diffusers(kohya, family)
    assert back.rank == RANK and back.tensors.keys() == peft.keys()
    for key in (k for k in peft if k.endswith(".lora_A.weight")):
        up = key.replace(".lora_A.", ".lora_B.")
        delta = ALPHA / RANK * peft[up] @ peft[key]  # [out, in]
        torch.testing.assert_close(back.alpha / back.rank * back.tensors[up] @ back.tensors[key], delta)
