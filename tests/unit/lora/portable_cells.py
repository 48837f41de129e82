"""One cell of the portable-LoRA matrix (tests/unit/lora/test_portable_matrix.py): a tiny run's
file of one family, adapter kind, layout and save dtype, loaded by one loader at one strength,
and the weights that loader gives the denoiser's linear layers.

    change = train_cell(family, case, work)             # the file + peft's own merged change
    weights = loaded_weights(cell, loader, strength)   # {module.weight: [out, in]}

Loaders (each a fresh pipeline / denoiser from the tiny model folder, fp32, CPU):
- "generate": lorastudio's apply_loras (what the generation worker and the sample previews run);
- "diffusers": the family pipeline's plain `load_lora_weights` + `set_adapters([s])`;
- "peft": the denoiser alone, peft's `inject_adapter_in_model` with the LoraConfig the file's
  `lora_adapter_metadata` header holds, then `set_peft_model_state_dict` (what a user of peft
  without diffusers does), no key left unexpected.
A layer's weight as the loaded model applies it is read from its forward on the identity matrix
(peft's adapter forward and a patched weight alike): y(I) - bias = W^T. ComfyUI's own loader runs
in tests/external/test_comfyui_loader.py (it needs a ComfyUI checkout); here the save-time check
in the file's sidecar (ComfyUI's key map, consumption and strength rules, lora/comfy.py) stands
for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from bench.comfyui_check import train_case
from safetensors import safe_open
from safetensors.torch import load_file

from lorastudio import families
from lorastudio.lora.files import ADAPTER_METADATA_KEY, denoiser_prefix


@dataclass(frozen=True)
class Cell:
    family: str
    case: str  # bench.comfyui_check.CASES' name
    lora: Path
    model: Path
    change: dict[str, torch.Tensor]  # {module.weight: merged - base}, peft's own merge of the trained layer
    header: dict[str, str]


def train_cell(family: str, case: str, work: Path, lora_format: str | None = None) -> Cell:
    """A 3-step tiny run of `case` (bench.comfyui_check.CASES) in `lora_format` (None: the case's
    or the family's default) and its file's header."""
    lora, model, change = train_case(family, work, case, lora_format)
    with safe_open(str(lora), "pt") as f:
        header = dict(f.metadata() or {})
    return Cell(family, case, lora, model, change, header)


def linear_weights(denoiser: torch.nn.Module) -> dict[str, torch.Tensor]:
    """{module.weight: [out, in]} of every linear layer of `denoiser` as its forward applies it
    (a peft-wrapped layer by its wrapper's name, its adapters included)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    out: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, module in denoiser.named_modules():
            if ".base_layer" in name or ".lora_" in name or ".hada_" in name or ".lokr_" in name:
                continue
            base = module.get_base_layer() if isinstance(module, BaseTunerLayer) else module
            if not isinstance(base, torch.nn.Linear):
                continue
            eye = torch.eye(base.in_features, dtype=base.weight.dtype)  # [in, in]
            y = module(eye)  # [in, out] = W^T (+ bias)
            if base.bias is not None:
                y = y - base.bias
            out[f"{name}.weight"] = y.T.float().clone()  # [out, in]
    return out


def _pipeline(model: Path, family: str) -> Any:
    from lorastudio.generate.pipeline import load_pipeline

    return load_pipeline(str(model), family, dtype=torch.float32, device="cpu")


def _denoiser(pipe: Any) -> torch.nn.Module:
    return pipe.unet if hasattr(pipe, "unet") and pipe.unet is not None else pipe.transformer


def base_weights(cell: Cell) -> dict[str, torch.Tensor]:
    return linear_weights(_denoiser(_pipeline(cell.model, cell.family)))


def loaded_weights(cell: Cell, loader: str, strength: float) -> dict[str, torch.Tensor]:
    """The denoiser's linear weights after `loader` applied the cell's file at `strength`."""
    if loader == "generate":
        from lorastudio.generate.pipeline import apply_loras

        pipe = _pipeline(cell.model, cell.family)
        apply_loras(pipe, [(cell.lora, strength)])
        return linear_weights(_denoiser(pipe))
    if loader == "diffusers":
        pipe = _pipeline(cell.model, cell.family)
        pipe.load_lora_weights(str(cell.lora), adapter_name="cell")
        pipe.set_adapters(["cell"], adapter_weights=[strength])
        return linear_weights(_denoiser(pipe))
    if loader == "peft":
        return linear_weights(peft_loaded(cell, strength))
    raise ValueError(loader)


def peft_loaded(cell: Cell, strength: float) -> torch.nn.Module:
    """The tiny denoiser with the cell's diffusers-layout file put in by peft alone: the header's
    LoraConfig, inject_adapter_in_model, set_peft_model_state_dict (no unexpected key), the
    adapter's scale multiplied by `strength` (peft's set_scale)."""
    from peft import LoraConfig, inject_adapter_in_model, set_peft_model_state_dict
    from peft.tuners.tuners_utils import BaseTunerLayer

    family = families.get(cell.family)
    denoiser = family.load_denoiser(str(cell.model), None, torch.float32, torch.device("cpu"))
    prefix = denoiser_prefix(cell.family) + "."
    packed = json.loads(cell.header[ADAPTER_METADATA_KEY])
    config = LoraConfig(**{k.removeprefix(prefix): v for k, v in packed.items()})
    inject_adapter_in_model(config, denoiser, adapter_name="cell")
    state = {k.removeprefix(prefix): v for k, v in load_file(str(cell.lora)).items()}
    result = set_peft_model_state_dict(denoiser, state, adapter_name="cell")
    unexpected = [k for k in result.unexpected_keys if "cell" in k or "lora" in k]
    if unexpected:
        raise AssertionError(f"peft left keys of the file unloaded: {unexpected[:5]}")
    missing = [k for k in result.missing_keys if "lora_" in k and "cell" in k]
    if missing:
        raise AssertionError(f"peft found no tensor for adapter layers: {missing[:5]}")
    for module in denoiser.modules():
        if isinstance(module, BaseTunerLayer):
            module.set_scale("cell", strength)
    return denoiser.eval()


def worst_error(
    base: dict[str, torch.Tensor],
    loaded: dict[str, torch.Tensor],
    change: dict[str, torch.Tensor],
    strength: float,
) -> tuple[float, list[str]]:
    """(the largest |loaded - base - strength * change| over a layer's largest trained change, the
    layers whose weight moved but the run trained none of)."""
    worst = 0.0
    stray = []
    for name, weight in loaded.items():
        moved = weight - base[name]  # [out, in]
        if name not in change:
            if moved.abs().max() > 0:
                stray.append(name)
            continue
        want = strength * change[name].reshape(moved.shape)
        scale = float(change[name].abs().max()) or 1.0
        worst = max(worst, float((moved - want).abs().max()) / scale)
    missing = [name for name in change if name not in loaded and change[name].dim() == 2]
    if missing:
        raise AssertionError(f"trained linear layers not found in the loaded model: {missing[:5]}")
    return worst, stray


ENCODERS = ("text_encoder", "text_encoder_2")


def train_run(family: str, work: Path, name: str, **over: object) -> tuple[Cell, Any]:
    """A 3-step tiny run of a text-to-image `family` (the sample dataset) with train_case's settings and `over`
    (its own tiny model and home under `work`): its Cell and the TrainResult (the trained
    denoiser, and an SDXL run's text encoders with train_text_encoder)."""
    from bench.comfyui_check import ALPHA, RANK, trained_change

    from lorastudio.config import TrainConfig
    from lorastudio.settings import Settings
    from lorastudio.tiny import make_sample_dataset, save_tiny_model, tiny_model_dir
    from lorastudio.training.loop import train

    spec = families.get(family).spec
    model = save_tiny_model(family, tiny_model_dir(family, work / "models"))
    raw = {
        "family": family, "base_model": str(model), "data_dir": str(make_sample_dataset(work / "data")),
        "resolution": max(32, 2 * spec.resolution_multiple), "steps": 3, "learning_rate": 5e-2,
        "lora_rank": RANK, "lora_alpha": ALPHA, "batch_size": 2, "output_name": name, "seed": 0,
        **({"max_sequence_length": 16} if "max_sequence_length" in spec.supports else {}), **over,
    }  # fmt: skip
    result = train(
        TrainConfig.model_validate(raw), [].append, settings=Settings(home=work / "home" / name),
        device="cpu", return_denoiser=True,
    )  # fmt: skip
    with safe_open(str(result.lora_path), "pt") as f:
        header = dict(f.metadata() or {})
    cell = Cell(family, name, result.lora_path, model, trained_change(result.denoiser), header)
    return cell, result


def train_text_encoder_cell(work: Path, lora_format: str) -> tuple[Cell, dict[str, torch.Tensor]]:
    """An SDXL run with train_text_encoder in `lora_format`: its Cell (the U-Net's change) and
    {"<encoder>.<module>.weight": the encoder layer's trained change (peft's B @ A x scale)}."""
    cell, result = train_run(
        "sdxl", work, f"te-{lora_format}", train_text_encoder=True, lora_format=lora_format
    )
    encoders = {
        f"{encoder}.{name}.weight": module.get_delta_weight("default").detach().float()  # [out, in]
        for encoder in ENCODERS
        for name, module in getattr(result.text_encoders.encoders, encoder).named_modules()
        if hasattr(module, "lora_B") and "default" in module.lora_B
    }
    return cell, encoders


def text_encoder_weights(cell: Cell, loader: str | None, strength: float) -> dict[str, torch.Tensor]:
    """{"<encoder>.<module>.weight": [out, in]} of both CLIP encoders' linear layers after
    `loader` ("generate" / "diffusers"; None: the plain pipeline) applied the file at `strength`."""
    pipe = _pipeline(cell.model, cell.family)
    if loader == "generate":
        from lorastudio.generate.pipeline import apply_loras

        apply_loras(pipe, [(cell.lora, strength)])
    elif loader == "diffusers":
        pipe.load_lora_weights(str(cell.lora), adapter_name="cell")
        pipe.set_adapters(["cell"], adapter_weights=[strength])
    return {
        f"{encoder}.{name}": weight
        for encoder in ENCODERS
        for name, weight in linear_weights(getattr(pipe, encoder)).items()
    }
