"""Writing a trained LoRA: <run_dir>/<name>.safetensors (diffusers keys + adapter metadata, or
the kohya / ComfyUI layout: cfg.lora_format) and the sidecar <run_dir>/<name>.json.

Both are written into a hidden staging folder inside run_dir and then renamed into place (the
sidecar first, the LoRA last), so a reader that sees the .safetensors sees a complete pair.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lorastudio import __version__
from lorastudio.lora.comfy import check_comfy_keys, comfy_key_map
from lorastudio.lora.convert import PeftLora
from lorastudio.lora.files import file_for_layout, write_lora_file
from lorastudio.lora.metadata import training_metadata
from lorastudio.training.assistant import assistant_sidecar
from lorastudio.training.lora import adapter_alpha, adapter_metadata, lora_state_dict
from lorastudio.training.lycoris_export import lycoris_file

if TYPE_CHECKING:
    from peft import LoraConfig

    from lorastudio.config import TrainConfig
    from lorastudio.families.base import FamilySpec

SIDECAR_FORMAT = "lorastudio.lora/1"


def build_sidecar(
    cfg: TrainConfig,
    *,
    steps_run: int,
    total_steps: int,
    stopped: bool,
    dataset_root: Path,
    dataset_fingerprint: str,
    num_images: int,
    lora_file: str,
    variant: str | None = None,
) -> dict[str, Any]:
    """The sidecar JSON of a run (cfg must be resolved): what was trained, on what, how far;
    `variant`: the base model's flavour (FamilySpec.variants) when the family has them."""
    return {
        "format": SIDECAR_FORMAT,
        "lora_file": lora_file,
        "family": cfg.family,
        "base_model": cfg.base_model,
        "variant": variant,
        "revision": cfg.revision,
        "rank": cfg.lora_rank,
        "alpha": cfg.lora_alpha,
        "steps": steps_run,
        "total_steps": total_steps,
        "stopped": stopped,
        "resolution": cfg.resolution,
        "trigger_word": cfg.trigger_word,
        "dataset": {"path": str(dataset_root), "fingerprint": dataset_fingerprint, "images": num_images},
        "config": cfg.model_dump(mode="json"),
        "created_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "lorastudio_version": __version__,
        **assistant_sidecar(cfg),  # a distilled base's assistant LoRA: merged for training, not in this file
    }


def save_lora(
    run_dir: Path,
    name: str,
    spec: FamilySpec,
    denoiser: Any,
    lora_config: LoraConfig,
    sidecar: dict[str, Any],
) -> Path:
    """Write <run_dir>/<name>.safetensors and <run_dir>/<name>.json; returns the LoRA path.

    The layout is the run's `lora_format` (sidecar["config"]): "diffusers" is what
    `<spec.pipeline_class>.load_lora_weights(path)` loads (keys prefixed with the denoiser name,
    the adapter config under `lora_adapter_metadata`); "kohya" is the family's kohya / ComfyUI
    layout (see lorastudio.lora.convert) with kohya's `ss_*` header keys. Both carry the training
    facts as `lorastudio.*` header strings. The sidecar gains "lora_format" and "comfyui_keys"
    (ComfyUI's key check of a kohya file: {"checked": true, "unconsumed": [...], ...}).
    On any failure the staging folder is removed and nothing is left in run_dir.
    Raises ConfigError when a trained layer has no name in the kohya layout.
    """
    layout = sidecar.get("config", {}).get("lora_format", "diffusers")
    adapter = sidecar.get("config", {}).get("adapter", "lora")
    info = training_metadata(sidecar)
    if adapter != "lora" and layout == "kohya":  # DoRA / LoHa / LoKr: the LyCORIS layout ComfyUI reads
        tensors, header, check = lycoris_file(
            denoiser, spec.name, adapter, info, base_weight_shapes(denoiser)
        )
    else:
        lora = PeftLora(lora_state_dict(denoiser), int(lora_config.r), adapter_alpha(lora_config))
        tensors, header = file_for_layout(lora, spec.name, layout, info, adapter_metadata(lora_config))
        check = {"checked": False, "reason": "diffusers layout; lora_format=kohya writes ComfyUI's layout"}
        if layout == "kohya":
            key_map = comfy_key_map(spec.name, base_weight_shapes(denoiser))
            check = check_comfy_keys({k: tuple(v.shape) for k, v in tensors.items()}, key_map).to_json()
    sidecar = {**sidecar, "lora_format": layout, "adapter": adapter, "comfyui_keys": check}
    weight_name = f"{name}.safetensors"
    staging = run_dir / f".staging-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    try:
        write_lora_file(staging / weight_name, tensors, header)
        (staging / f"{name}.json").write_text(json.dumps(sidecar, indent=2) + "\n", encoding="utf-8")
        os.replace(staging / f"{name}.json", run_dir / f"{name}.json")
        os.replace(staging / weight_name, run_dir / weight_name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return run_dir / weight_name


def base_weight_shapes(denoiser: Any) -> dict[str, tuple[int, ...]]:
    """{module name: weight shape} of the denoiser's own layers (a LoRA-wrapped layer under its
    plain name; the LoRA's own parameters left out)."""
    shapes = {}
    for key, param in denoiser.named_parameters():
        if key.endswith(".weight") and ".lora_" not in key:
            shapes[key.removesuffix(".weight").replace(".base_layer", "")] = tuple(param.shape)
    return shapes
