"""OneTrainer's exported config JSON -> lorastudio settings, main keys (no torch). Read from
OneTrainer's training_presets/*.json: upper-case enum values (model_type, optimizer,
learning_rate_scheduler, ema, *_unit), `concepts` inline or in `concept_file_name`; samples and weight dtypes: onetrainer_samples.py."""

from __future__ import annotations

from typing import Any

from lorastudio.config_import import peer_defaults, values
from lorastudio.config_import.common import (
    base_model,
    carry,
    drop_all,
    folder,
    optimizer_args,
    side_path_above,
    simple,
)
from lorastudio.config_import.onetrainer_samples import precision, samples
from lorastudio.config_import.reading import read_document
from lorastudio.config_import.report import NOT_NEEDED, NOT_SUPPORTED, Draft

_FAMILIES = (("XL", "sdxl"), ("FLUX_2", "flux2"), ("FLUX_FILL", None), ("FLUX", "flux"), ("CHROMA", "chroma"),
             ("QWEN", "qwen-image"), ("Z_IMAGE", "z-image"), ("KREA", "krea2"))  # fmt: skip
_SIMPLE = {
    "learning_rate": ("learning_rate", values.number), "learning_rate_scheduler": ("lr_scheduler", values.scheduler),
    "learning_rate_warmup_steps": ("lr_warmup_steps", values.integer), "weight_decay": ("weight_decay", values.number),
    "epochs": ("num_epochs", values.integer), "batch_size": ("batch_size", values.integer),
    "gradient_accumulation_steps": ("grad_accum", values.integer), "resolution": ("resolution", values.integer),
    "lora_rank": ("lora_rank", values.integer), "lora_alpha": ("lora_alpha", values.number),
    "dropout_probability": ("lora_dropout", values.number), "ema_decay": ("ema_decay", values.number),
    "ema_update_step_interval": ("ema_update_every", values.integer), "output_dtype": ("save_dtype", values.save_dtype),
    "aspect_ratio_bucketing": ("aspect_buckets", values.flag), "clip_grad_norm": ("max_grad_norm", values.number),
}  # fmt: skip


def build(draft: Draft, data: dict[str, Any], family: str | None) -> None:
    """Map OneTrainer's `data` into `draft`."""
    kind = str(data.get("model_type", ""))
    found = next((fam for word, fam in _FAMILIES if word in kind.upper()), None)
    if family is not None:
        draft.set("--family", "family", family)
    elif found is not None:
        draft.set("model_type", "family", found)
    else:
        draft.fail(
            "model_type", f"{kind!r} is not a family lorastudio trains: pass --family (`lorastudio families`)"
        )
    if "training_method" in data:
        method = str(data["training_method"]).upper()
        if method == "LORA":
            draft.drop("training_method", f"{NOT_NEEDED}: lorastudio trains adapters")
        else:
            draft.fail("training_method", f"{method}: lorastudio trains LoRA-family adapters only")
    if "base_model_name" in data:
        base_model(draft, "base_model_name", data["base_model_name"])
    simple(
        draft,
        {k: v for k, v in data.items() if k != "ema_decay" or data.get("ema") in ("GPU", "CPU")},
        _SIMPLE,
    )
    if data.get("ema") in ("GPU", "CPU"):
        draft.set("ema", "ema_on_cpu", data["ema"] == "CPU")
    elif "ema" in data:
        draft.drop("ema", f"{NOT_NEEDED}: EMA is off by default")
        if "ema_decay" in data:
            draft.drop("ema_decay", f"{NOT_NEEDED}: ema is OFF")
    if data.get("lora_decompose") is True:
        draft.set("lora_decompose", "adapter", "dora")
    _optimizer(draft, data.get("optimizer"))
    precision(draft, data)
    samples(draft, data)
    drop_all(draft, "", data, _NEEDLESS)
    if "gradient_checkpointing" in data:
        on = str(data["gradient_checkpointing"]).upper()
        draft.set("gradient_checkpointing", "gradient_checkpointing", "off" if on in ("OFF", "FALSE") else "full",
                  "activations recomputed on the GPU, not offloaded" if on == "CPU_OFFLOADED" else "")  # fmt: skip
    if "offset_noise_weight" in data:
        weight = data["offset_noise_weight"]
        if weight:
            carry(draft, "offset_noise_weight", weight, "noise_offset", values.number)
        else:
            draft.drop("offset_noise_weight", f"{NOT_NEEDED}: 0 is off")
    _loss_weight(draft, data)
    _every(draft, data, "sample_after", "sample_every")
    _every(draft, data, "save_every", "save_lora_every")
    _concepts(draft, data)
    draft.unread(data)


_NEEDLESS = {
    "__version": f"{NOT_NEEDED}: OneTrainer's own file version",
    "workspace_dir": f"{NOT_NEEDED}: each run is written under the studio home's outputs/<output_name>",
    "cache_dir": f"{NOT_NEEDED}: the studio keeps its caches",
    "output_model_destination": f"{NOT_NEEDED}: the LoRA is written in the run's folder",
    "output_model_format": f"{NOT_NEEDED}: LoRA files are .safetensors",
    "latent_caching": f"{NOT_NEEDED}: latents are cached by default (latent_cache auto)",
    "tensorboard": f"{NOT_NEEDED}: report_to = ['tensorboard'] turns it on",
    "train_device": f"{NOT_NEEDED}: `lorastudio train --device` picks the GPU",
    "temp_device": f"{NOT_NEEDED}: memory_budget_gb plans memory",
}


def _optimizer(draft: Draft, raw: Any) -> None:
    """optimizer (a name, or a table with its name and arguments)."""
    name = raw.get("optimizer") if isinstance(raw, dict) else raw
    if name is None:
        return
    peer = "optimizer.optimizer" if isinstance(raw, dict) else "optimizer"
    ours = None
    try:
        ours, how = values.optimizer(name)
        draft.set(peer, "optimizer", ours, how)
    except values.Skip as why:
        draft.drop(peer, str(why))
    if isinstance(raw, dict):
        args = {k: v for k, v in raw.items() if k != "optimizer" and v is not None}
        optimizer_args(draft, "optimizer", ours, args)


def _loss_weight(draft: Draft, data: dict[str, Any]) -> None:
    """loss_weight_fn / loss_weight_strength as snr_gamma: OneTrainer's CONSTANT (its default,
    also when the file leaves it out) weights no loss, so a family with min-SNR here gets
    snr_gamma = null, not lorastudio's default; MIN_SNR_GAMMA's gamma is loss_weight_strength
    (default 5.0). A file before OneTrainer's config version 2 names min_snr_gamma instead (its
    migration: nonzero is MIN_SNR_GAMMA of that strength). P2, DEBIASED_ESTIMATION, SIGMA: not
    offered (each line says so)."""
    snr, strength = peer_defaults.weights_snr(draft), data.get("loss_weight_strength")
    if "loss_weight_fn" not in data and "min_snr_gamma" in data:
        old = data["min_snr_gamma"]
        if old is None or values.is_off(old):
            _off(draft, "min_snr_gamma", snr, "0 is no min-SNR weighting")
        elif snr:
            carry(draft, "min_snr_gamma", old, "snr_gamma", values.number)
        else:
            draft.drop(
                "min_snr_gamma", f"{NOT_SUPPORTED}: min-SNR weighting is for DDPM families (SDXL) here"
            )
        kind = "MIN_SNR_GAMMA" if snr and not values.is_off(old or 0) else "CONSTANT"
    elif "loss_weight_fn" not in data:
        peer_defaults.no_snr(draft, "loss_weight_fn", peer_defaults.ONETRAINER_SNR)
        kind = "CONSTANT"
    else:
        kind = str(data["loss_weight_fn"]).upper()
        if kind == "CONSTANT":
            _off(draft, "loss_weight_fn", snr, "CONSTANT is no min-SNR weighting")
        elif kind == "MIN_SNR_GAMMA" and snr and strength is None:
            draft.set("loss_weight_fn", "snr_gamma", 5.0,
                      "loss_weight_strength unset: OneTrainer's default 5.0 (TrainConfig.default_values)")  # fmt: skip
            return
        elif kind == "MIN_SNR_GAMMA" and snr:
            carry(draft, "loss_weight_strength", strength, "snr_gamma", values.number)
            draft.fold("loss_weight_fn", "snr_gamma", kind)
            return
        else:
            where = "" if snr or kind != "MIN_SNR_GAMMA" else " for DDPM families (SDXL)"
            draft.drop(
                "loss_weight_fn", f"{NOT_SUPPORTED}: min-SNR (snr_gamma) is the one loss weighting{where}"
            )
    if "loss_weight_strength" in data:
        draft.drop("loss_weight_strength", f"{NOT_NEEDED}: loss_weight_fn {kind} does not read it"
                   if kind == "CONSTANT" else f"{NOT_SUPPORTED}: loss_weight_fn {kind} is not carried")  # fmt: skip


def _off(draft: Draft, peer: str, snr: bool, why: str) -> None:
    """The file's `peer` turns min-SNR weighting off (`why`): snr_gamma = null where the family
    has it here (`snr`), else not needed."""
    if snr:
        draft.set(peer, "snr_gamma", None, f"{why}: null (SDXL's default here is 5)")
    else:
        draft.drop(peer, f"{NOT_NEEDED}: {why}, as here")


def _every(draft: Draft, data: dict[str, Any], key: str, ours: str) -> None:
    """`key` with its `<key>_unit`: carried as `ours` when counted in steps."""
    if key not in data:
        return
    unit = str(data.get(f"{key}_unit", "STEP")).upper()
    if unit == "STEP":
        carry(draft, key, data[key], ours, values.integer)
        if f"{key}_unit" in data:
            draft.fold(f"{key}_unit", ours, unit)
    elif unit == "NEVER":
        draft.drop(key, f"{NOT_NEEDED}: never is the default")
        draft.drop(f"{key}_unit", f"{NOT_NEEDED}: never is the default")
    else:
        draft.drop(key, f"{NOT_SUPPORTED}: counted in optimizer steps here, not {unit.lower()}s")
        draft.drop(f"{key}_unit", f"{NOT_SUPPORTED}: counted in optimizer steps here")


def _concepts(draft: Draft, data: dict[str, Any]) -> None:
    """concepts (inline, or concept_file_name's file) as [[datasets]] entries: path, repeats by REPEATS balancing, loss weight."""
    concepts, root = data.get("concepts"), "concepts"
    if concepts is None and isinstance(data.get("concept_file_name"), str):
        path = side_path_above(draft, "concept_file_name", data["concept_file_name"])
        if path is None:
            return
        concepts = read_document(path, where=f"{draft.file.name}: concept_file_name")
        draft.drop("concept_file_name", f"{NOT_NEEDED}: its concepts read as [[datasets]] entries")
        root = path.name
    if not isinstance(concepts, list):
        return
    n = 0
    for i, concept in enumerate(concepts):
        where = f"{root}[{i}]"
        if not isinstance(concept, dict) or concept.get("enabled") is False or "path" not in concept:
            draft.drop(
                where, f"{NOT_NEEDED}: a disabled concept" if isinstance(concept, dict) else "not a concept"
            )
            continue
        found = folder(draft, f"{where}.path", concept["path"])
        if found is None:
            draft.drop(where, f"{NOT_SUPPORTED}: its folder is not carried")
            continue
        draft.set(f"{where}.path", f"datasets.{n}.path", found[0], found[1])
        if concept.get("balancing_strategy", "REPEATS") == "REPEATS" and "balancing" in concept:
            carry(draft, f"{where}.balancing", concept["balancing"], f"datasets.{n}.repeats", values.integer)
        simple(draft, concept, {"loss_weight": (f"datasets.{n}.loss_weight", values.number)}, f"{where}.")
        n += 1
    if root != "concepts":
        draft.unread(concepts, root)
