"""The safetensors header of a LoRA file: training facts as `lorastudio.*` strings in every file,
plus kohya's `ss_*` keys in kohya files (so kohya-aware tools recognise them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PREFIX = "lorastudio."
# kohya's ss_base_model_version per family (sd-scripts' names where it has one)
BASE_MODEL_VERSION = {
    "sdxl": "sdxl_base_v1-0",
    "flux": "flux1",
    "qwen-image": "qwen_image",
    "z-image": "z_image",
    "flux2": "flux2",  # ai-toolkit's names for FLUX.2 dev / klein
    "flux2-klein": "flux2_klein",
    "flux-kontext": "flux1",  # FLUX.1's layout, which kohya tools read as flux1
    "qwen-image-edit": "qwen_image_edit",  # Qwen-Image's layout; told apart from Qwen-Image LoRAs
    "chroma": "chroma",
    "krea2": "krea2",
}


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def training_metadata(sidecar: Mapping[str, Any]) -> dict[str, str]:
    """`lorastudio.*` header strings from a run's sidecar (see training.export.build_sidecar):
    family, base model, rank, alpha, steps, resolution, trigger word, dataset fingerprint, ..."""
    config = sidecar.get("config", {})
    dataset = sidecar.get("dataset", {})
    facts = {
        "family": sidecar.get("family"),
        "base_model": sidecar.get("base_model"),
        "revision": sidecar.get("revision"),
        "rank": sidecar.get("rank"),
        "alpha": sidecar.get("alpha"),
        "steps": sidecar.get("steps"),
        "total_steps": sidecar.get("total_steps"),
        "resolution": sidecar.get("resolution"),
        "trigger_word": sidecar.get("trigger_word"),
        "dataset_fingerprint": dataset.get("fingerprint"),
        "dataset_images": dataset.get("images"),
        "output_name": config.get("output_name"),
        "learning_rate": config.get("learning_rate"),
        "seed": config.get("seed"),
        "lora_format": config.get("lora_format", "diffusers"),
        "save_dtype": config.get("save_dtype", "fp32"),
        "created_at": sidecar.get("created_at"),
        "version": sidecar.get("lorastudio_version"),
    }
    return {PREFIX + k: _text(v) for k, v in facts.items()}


def kohya_metadata(info: Mapping[str, str], rank: int, alpha: float) -> dict[str, str]:
    """kohya sd-scripts' `ss_*` header keys from the `lorastudio.*` ones (missing facts are
    left out) and the file's rank and alpha."""

    def get(key: str) -> str:
        return info.get(PREFIX + key, "")

    resolution = get("resolution")
    keys = {
        "ss_network_module": "networks.lora",
        "ss_network_dim": str(rank),
        "ss_network_alpha": f"{alpha:g}",
        "ss_base_model_version": BASE_MODEL_VERSION.get(get("family"), get("family")),
        "ss_sd_model_name": get("base_model"),
        "ss_output_name": get("output_name"),
        "ss_steps": get("steps"),
        "ss_max_train_steps": get("total_steps"),
        "ss_resolution": f"({resolution}, {resolution})" if resolution else "",
        "ss_learning_rate": get("learning_rate"),
        "ss_seed": get("seed"),
        "ss_num_train_images": get("dataset_images"),
        "ss_training_comment": f"trigger: {get('trigger_word')}" if get("trigger_word") else "",
    }
    return {k: v for k, v in keys.items() if v}
