"""Writing a trained LoRA: <run_dir>/<name>.safetensors (diffusers keys + adapter metadata, via
the family pipeline's own `save_lora_weights`) and the sidecar <run_dir>/<name>.json.

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
from lorastudio.training.lora import adapter_metadata, lora_state_dict

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
) -> dict[str, Any]:
    """The sidecar JSON of a run (cfg must be resolved): what was trained, on what, how far."""
    return {
        "format": SIDECAR_FORMAT,
        "lora_file": lora_file,
        "family": cfg.family,
        "base_model": cfg.base_model,
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

    The file is what `<spec.pipeline_class>.load_lora_weights(path)` loads in plain diffusers:
    keys prefixed with the denoiser name, and `<prefix>_lora_adapter_metadata` in the header.
    On any failure the staging folder is removed and nothing is left in run_dir.
    """
    import diffusers

    pipeline_cls = getattr(diffusers, spec.pipeline_class)
    prefix = spec.lora_layers_kwarg.removesuffix("_lora_layers")
    weight_name = f"{name}.safetensors"
    staging = run_dir / f".staging-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    try:
        pipeline_cls.save_lora_weights(
            str(staging),
            weight_name=weight_name,
            safe_serialization=True,
            **{
                spec.lora_layers_kwarg: lora_state_dict(denoiser),
                f"{prefix}_lora_adapter_metadata": adapter_metadata(lora_config),
            },
        )
        staged_lora = staging / weight_name
        if not staged_lora.is_file():
            raise OSError(f"{spec.pipeline_class}.save_lora_weights wrote no {weight_name}")
        (staging / f"{name}.json").write_text(json.dumps(sidecar, indent=2) + "\n", encoding="utf-8")
        os.replace(staging / f"{name}.json", run_dir / f"{name}.json")
        os.replace(staged_lora, run_dir / weight_name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return run_dir / weight_name
