"""The safetensors header of a LoRA file: training facts as `lorastudio.*` strings in every file,
the SAI model spec's `modelspec.*` keys in every file (what the file is: architecture, key
naming, title, date, resolution), plus kohya's `ss_*` keys in kohya files (so kohya-aware tools
recognise them). Every value is a string (safetensors metadata)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lorastudio import json_read

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


# the SAI model spec (github.com/Stability-AI/ModelSpec) version these keys follow
MODELSPEC_VERSION = "1.0.0"
MODELSPEC = "modelspec."
ARCHITECTURE_KEY = MODELSPEC + "architecture"
# the spec's "hash of all tensor content (ie excluding the header section), with 0x prefix": the
# sha256 of the file's bytes after its header. modelspec_metadata writes a placeholder of the
# same length, which lora/files.write_lora_file replaces in place once the data is on disk (the
# data region does not depend on the header, so the hash is the tensors' alone)
HASH_KEY = MODELSPEC + "hash_sha256"
HASH_PLACEHOLDER = "0x" + "0" * 64
# the spec's architecture id of each family's base model (kohya sd-scripts' ids where it has
# one: SDXL, FLUX.1 dev / schnell, Chroma); the file's adapter kind follows as "/lora" or
# "/lycoris" (LoHa / LoKr / DoRA in the LyCORIS layout)
ARCHITECTURES = {
    "sdxl": "stable-diffusion-xl-v1-base",
    "flux": "flux-1-dev",  # "flux-1-schnell" for a base without guidance embedding (architecture())
    "flux-kontext": "flux-1-kontext-dev",
    "chroma": "chroma",
    "qwen-image": "qwen-image",
    "qwen-image-edit": "qwen-image-edit",
    "z-image": "z-image",
    "flux2": "flux-2-dev",
    "flux2-klein": "flux-2-klein",  # a base of unknown size (architecture() names 4B / 9B)
    "krea2": "krea-2",
}
# FLUX.2 klein's sizes by their transformer's double-stream blocks (families/flux2_klein.py's
# variants: 4B 5, 9B 8): other weights, so other ids, named as BFL's and Comfy-Org's files are
# (flux-2-klein-4b / -9b.safetensors); base and step-distilled share a size's layout and id
KLEIN_SIZES = {5: "flux-2-klein-4b", 8: "flux-2-klein-9b"}
# the code base whose weight names a kohya / LyCORIS-layout file's keys follow (its
# lora_unet_* / diffusion_model.* names); a diffusers-layout file's are "diffusers"
_SGM = "https://github.com/Stability-AI/generative-models"
_BFL_FLUX = "https://github.com/black-forest-labs/flux"
_COMFYUI = "https://github.com/comfyanonymous/ComfyUI"
ORIGINAL_IMPLEMENTATION = {
    "sdxl": _SGM,
    "flux": _BFL_FLUX,
    "flux-kontext": _BFL_FLUX,
    "chroma": "https://huggingface.co/lodestones/Chroma",  # kohya's id for Chroma
    "qwen-image": "diffusers",  # its kohya layout keeps the diffusers names (lora/names.py)
    "qwen-image-edit": "diffusers",
    "z-image": "diffusers",
    "flux2": _COMFYUI,  # FLUX.2's BFL names as ComfyUI's model holds them (lora/names_flux2.py)
    "flux2-klein": _COMFYUI,
    "krea2": _COMFYUI,  # comfy.ldm.krea2's names (lora/krea2_names.py)
}


def architecture(family: str, denoiser_config: Any = None) -> str:
    """The model spec's architecture id of `family`'s base (no adapter suffix), from its
    denoiser's config where one family has several: FLUX.1 without guidance embedding is
    schnell (as kohya tells them apart), FLUX.2 klein's size by its blocks (KLEIN_SIZES)."""
    if family == "flux" and getattr(denoiser_config, "guidance_embeds", True) is False:
        return "flux-1-schnell"
    if family == "flux2-klein" and (size := KLEIN_SIZES.get(getattr(denoiser_config, "num_layers", None))):
        return size
    return ARCHITECTURES.get(family, family)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def training_metadata(sidecar: Mapping[str, Any]) -> dict[str, str]:
    """`lorastudio.*` header strings from a run's sidecar (see training.adapters.export.build_sidecar):
    family, base model (its name, model_name: the sidecar keeps the path), rank, alpha, steps,
    resolution, trigger word, dataset fingerprint, the
    adapter and optimizer, and with EMA which weights the file holds ("ema" or "raw": the
    sidecar's ema.weights; "" without EMA) and the decay, the init_lora file the run started from
    (its name and sha256; only for such a run), ..."""
    config = sidecar.get("config", {})
    dataset = sidecar.get("dataset", {})
    ema = sidecar.get("ema") if isinstance(sidecar.get("ema"), Mapping) else {}
    facts = {
        "family": sidecar.get("family"),
        "base_model": model_name(str(sidecar["base_model"])) if sidecar.get("base_model") else None,
        "revision": sidecar.get("revision"),
        "rank": sidecar.get("rank"),
        "alpha": sidecar.get("alpha"),
        "steps": sidecar.get("steps"),
        "total_steps": sidecar.get("total_steps"),
        "resolution": sidecar.get("resolution"),
        "trigger_word": sidecar.get("trigger_word"),
        "v_prediction": config.get("v_prediction"),
        "dataset_fingerprint": dataset.get("fingerprint"),
        "dataset_images": dataset.get("images"),
        "output_name": config.get("output_name"),
        "learning_rate": config.get("learning_rate"),
        "seed": config.get("seed"),
        "adapter": config.get("adapter", "lora"),
        "optimizer": config.get("optimizer"),
        "ema": ema.get("weights"),
        "ema_decay": ema.get("decay"),
        "lora_format": config.get("lora_format", "diffusers"),
        "save_dtype": config.get("save_dtype", "fp32"),
        "created_at": sidecar.get("created_at"),
        "version": sidecar.get("lorastudio_version"),
    }
    init = sidecar.get("init_lora")  # the LoRA file the run started from (training/adapters/init_lora.py)
    if isinstance(init, Mapping):
        facts["init_lora"] = init.get("file")
        facts["init_lora_sha256"] = init.get("sha256")
    return {PREFIX + k: _text(v) for k, v in facts.items()}


def model_name(base_model: str) -> str:
    """A base model as a shared LoRA file's header names it (`lorastudio.base_model`,
    `ss_sd_model_name`): a local path by its last part, as sd-scripts' `ss_sd_model_name`
    (train_network.py: os.path.basename of a path; the file is shared, the trainer's folders are
    not), a hub id ("owner/name") or a folder under models/ by its name as it is. A path is
    absolute (POSIX or Windows), starts with ~ or ., or holds a backslash."""
    from pathlib import PurePosixPath, PureWindowsPath

    if base_model.startswith(("~", ".")) or PurePosixPath(base_model).is_absolute():
        return PurePosixPath(base_model).name or base_model
    if "\\" in base_model or PureWindowsPath(base_model).is_absolute():
        return PureWindowsPath(base_model).name or base_model
    return base_model


def kohya_metadata(info: Mapping[str, str], rank: int, alpha: float) -> dict[str, str]:
    """kohya sd-scripts' `ss_*` header keys from the `lorastudio.*` ones (missing facts are
    left out) and the file's rank and alpha."""

    def get(key: str) -> str:
        return info.get(PREFIX + key, "")

    resolution = get("resolution")
    if resolution.startswith("["):  # several resolutions: kohya's key names one, the largest
        sides = json_read.loads(resolution)
        resolution = str(max(sides)) if sides else ""
    keys = {
        "ss_network_module": "networks.lora",
        "ss_network_dim": str(rank),
        "ss_network_alpha": f"{alpha:g}",
        "ss_base_model_version": BASE_MODEL_VERSION.get(get("family"), get("family")),
        "ss_sd_model_name": model_name(get("base_model")),
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


def carried_header(header: Mapping[str, str]) -> dict[str, str]:
    """What a file made from another (convert, merge, resize) carries over from its header: the
    `lorastudio.*` facts and the model spec's architecture (the spec's advice to tools that
    rewrite a file); the other `modelspec.*` keys are derived again (modelspec_metadata). A base
    model given as a local path (a file of an earlier version) is carried as its name
    (model_name)."""
    carried = {k: v for k, v in header.items() if k.startswith(PREFIX) or k == ARCHITECTURE_KEY}
    if carried.get(PREFIX + "base_model"):
        carried[PREFIX + "base_model"] = model_name(carried[PREFIX + "base_model"])
    return carried


def modelspec_metadata(info: Mapping[str, str]) -> dict[str, str]:
    """The SAI model spec's `modelspec.*` header keys of a LoRA file from its `lorastudio.*`
    strings (family, lora_format: "diffusers" / "kohya" / "lycoris", output name, date,
    resolution, trigger word, v_prediction, merged_from), hash_sha256's placeholder (the file's
    writer, lora/files.write_lora_file, puts the tensors' hash there) and `modelspec.architecture` when
    `info` carries one (a run's save: architecture(); a converted file: its source's), else the
    family's. Keys whose fact is unknown are left out; prediction_type is SDXL's only (kohya
    writes none for the rectified-flow families), and only where the run says which."""

    def get(key: str) -> str:
        return info.get(PREFIX + key, "")

    family = get("family")
    layout = get("lora_format") or "diffusers"
    base = info.get(ARCHITECTURE_KEY, "").split("/")[0] or architecture(family)
    adapter = "lycoris" if layout == "lycoris" else "lora"
    resolution = get("resolution")
    if resolution.startswith("["):  # several resolutions: the largest is the model's
        sides = json_read.loads(resolution)
        resolution = str(max(sides)) if sides else ""
    prediction = {"true": "v", "false": "epsilon"}.get(get("v_prediction").lower(), "")
    merged = get("merged_from")
    keys = {
        "modelspec.sai_model_spec": MODELSPEC_VERSION,
        ARCHITECTURE_KEY: f"{base}/{adapter}",
        "modelspec.implementation": "diffusers"
        if layout == "diffusers"
        else ORIGINAL_IMPLEMENTATION.get(family, "diffusers"),
        "modelspec.title": get("output_name") or "LoRA",
        "modelspec.date": get("created_at"),
        HASH_KEY: HASH_PLACEHOLDER,
        "modelspec.resolution": f"{resolution}x{resolution}" if resolution else "",
        "modelspec.trigger_phrase": get("trigger_word"),
        "modelspec.prediction_type": prediction if family == "sdxl" else "",
        "modelspec.merged_from": ", ".join(str(name) for name, _ in json_read.loads(merged))
        if merged
        else "",
    }
    return {k: v for k, v in keys.items() if v}
