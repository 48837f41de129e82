"""ai-toolkit's YAML (or JSON) job config -> lorastudio settings (no torch).

Read from ai-toolkit's own examples (config/examples/train_lora_*.yaml): `job`, `config.name`,
`config.process[0]` with `network`, `save`, `datasets`, `train`, `model`, `sample`, and `meta`.
One process is imported; a job of several names the others as not carried.
"""

from __future__ import annotations

from typing import Any

from lorastudio.config_import import peer_defaults, values
from lorastudio.config_import.common import base_model, carry, drop_all, optimizer_args
from lorastudio.config_import.report import NOT_NEEDED, NOT_SUPPORTED, Draft
from lorastudio.config_import.samples import sample_prompts

_ARCH = {  # model.arch -> family; the legacy is_* flags below
    "flux": "flux", "flux_kontext": "flux-kontext", "flux2": "flux2", "flux2_klein": "flux2-klein",
    "flux2_klein_4b": "flux2-klein", "flux2_klein_9b": "flux2-klein", "chroma": "chroma",
    "qwen_image": "qwen-image", "qwen_image_edit": "qwen-image-edit", "qwen_image_edit_plus": "qwen-image-edit",
    "zimage": "z-image", "z_image": "z-image", "sdxl": "sdxl", "krea2": "krea2",
}  # fmt: skip
_FLAGS = {"is_flux": "flux", "is_xl": "sdxl"}
_OTHER_FLAGS = (
    "is_v2",
    "is_v3",
    "is_pixart",
    "is_pixart_sigma",
    "is_auraflow",
    "is_ssd",
    "is_vega",
    "is_lumina2",
)

_PROCESS_NOT_NEEDED = {
    "type": f"{NOT_NEEDED}: lorastudio trains LoRA-family adapters only",
    "training_folder": f"{NOT_NEEDED}: each run is written under the studio home's outputs/<output_name>",
    "device": f"{NOT_NEEDED}: `lorastudio train --device` picks the GPU",
    "performance_log_every": f"{NOT_NEEDED}: the run logs its speed every step",
    "logging": f"{NOT_NEEDED}: the run's log is the studio's (report_to for trackers)",
}


def build(draft: Draft, data: dict[str, Any], family: str | None) -> None:
    """Map ai-toolkit's job `data` into `draft` (the family named by `family`, else by the model)."""
    drop_all(draft, "", data, {"job": f"{NOT_NEEDED}: an import is one training run",
                               "meta": f"{NOT_NEEDED}: ai-toolkit's own metadata"})  # fmt: skip
    config = data["config"]
    processes = config["process"]
    if "name" in config:
        carry(draft, "config.name", config["name"], "output_name", values.text)
    for i in range(1, len(processes)):
        draft.drop(f"config.process[{i}]", f"{NOT_SUPPORTED}: one run is imported, the job's first process")
    process = processes[0] if processes else None
    if not isinstance(process, dict):
        draft.fail("config.process[0]", "the job has no process table to import")
        return
    root = "config.process[0]."
    drop_all(draft, root, process, _PROCESS_NOT_NEEDED)
    trigger = process.get("trigger_word")
    if "trigger_word" in process:
        trigger = carry(draft, root + "trigger_word", trigger, "trigger_word", values.text)
    _model(draft, root + "model", _table(draft, process, "model", root), family)
    _network(draft, root + "network", _table(draft, process, "network", root))
    _train(draft, root + "train", _table(draft, process, "train", root))
    _save(draft, root + "save", _table(draft, process, "save", root))
    _datasets(draft, root + "datasets", process.get("datasets"))
    sample = _table(draft, process, "sample", root)
    if sample:
        sample_prompts(draft, root + "sample", sample, trigger)
    draft.unread(data)


def _table(draft: Draft, process: dict[str, Any], key: str, root: str) -> dict[str, Any]:
    """The table `process[key]` ({} when absent; a value that is not a table is a fault of the file)."""
    value = process.get(key, {})
    if isinstance(value, dict):
        return value
    draft.fail(root + key, "is not a table")
    return {}


def _model(draft: Draft, peer: str, model: dict[str, Any], family: str | None) -> None:
    """model: the base (name_or_path), the family (`family`, else arch, the is_* flags or the name), quantisation, the assistant LoRA."""
    name = model.get("name_or_path")
    if name is not None:
        base_model(draft, f"{peer}.name_or_path", name)
    found, source = None, ""  # the family, the key that names it
    if "arch" in model:
        found = _ARCH.get(str(model["arch"]).lower())
        source = f"{peer}.arch" if found else ""
        if found is None:
            draft.drop(
                f"{peer}.arch", f"{NOT_SUPPORTED}: {model['arch']!r} is not a family lorastudio trains"
            )
    for key, fam in _FLAGS.items():
        if model.get(key) is True and found is None:
            found, source = fam, f"{peer}.{key}"
        elif key in model:
            draft.drop(f"{peer}.{key}", f"{NOT_NEEDED}: the family is {found or 'named otherwise'}")
    for key in _OTHER_FLAGS:
        if key in model:
            draft.drop(
                f"{peer}.{key}",
                f"{NOT_SUPPORTED}: not a family lorastudio trains" if model[key] else NOT_NEEDED,
            )
    how = ""
    if found is None and (found := values.family_of(name)) is not None:
        source, how = f"{peer}.name_or_path", "the family named by the model's name"
    if family is not None:
        draft.set("--family", "family", family)
        if source and source != f"{peer}.name_or_path":
            draft.drop(source, f"{NOT_NEEDED}: --family {family} given")
    elif found is not None:
        draft.set(source, "family", found, how)
    else:
        draft.fail(f"{peer}.arch", "names no family lorastudio trains: pass --family (`lorastudio families`)")
    if model.get("quantize") is True:
        carry(draft, f"{peer}.quantize", model.get("qtype", "qfloat8"), "base_precision",
              lambda q: values.quantised(q)[0], _how(values.quantised, model.get("qtype", "qfloat8")))  # fmt: skip
        if "qtype" in model:
            draft.drop(f"{peer}.qtype", f"{NOT_NEEDED}: carried with quantize")
    elif "quantize" in model:
        draft.drop(f"{peer}.quantize", f"{NOT_NEEDED}: the base is not quantised by default")
        if "qtype" in model:
            draft.drop(f"{peer}.qtype", f"{NOT_NEEDED}: quantize is off")
    if "assistant_lora_path" in model:
        carry(
            draft, f"{peer}.assistant_lora_path", model["assistant_lora_path"], "assistant_lora", values.text
        )
    reasons = {
        "quantize_te": f"{NOT_SUPPORTED}: text encoders run once, in phase 1, then leave the GPU",
        "qtype_te": f"{NOT_SUPPORTED}: text encoders run once, in phase 1, then leave the GPU",
        "low_vram": f"{NOT_NEEDED}: memory_budget_gb plans memory",
        "model_kwargs": f"{NOT_SUPPORTED}: ai-toolkit's model options",
        "lora_path": f"{NOT_SUPPORTED}: a LoRA fused into the base: merge it first (`lorastudio lora merge`)",
    }
    drop_all(draft, f"{peer}.", model, reasons)


def _network(draft: Draft, peer: str, net: dict[str, Any]) -> None:
    """network: the adapter (type), its rank, alpha, dropout and LoKr factor."""
    kind = str(net.get("type", "lora")).lower()
    adapter = {"lora": "lora", "lokr": "lokr", "loha": "loha", "dora": "dora", "locon": "lora"}.get(kind)
    if "type" in net:
        if adapter is None:
            draft.drop(f"{peer}.type", f"{NOT_SUPPORTED}: adapters here are lora, dora, loha and lokr")
        else:
            how = "LoCon's conv layers are not trained: linear layers only" if kind == "locon" else ""
            draft.set(f"{peer}.type", "adapter", adapter, how)
    for key, ours, conv in (("linear", "lora_rank", values.integer), ("linear_alpha", "lora_alpha", values.number),
                            ("dropout", "lora_dropout", values.number), ("lokr_factor", "lokr_factor", values.integer)):  # fmt: skip
        if key in net:
            carry(draft, f"{peer}.{key}", net[key], ours, conv)
    reasons = {
        "conv": f"{NOT_SUPPORTED}: adapters train linear layers only",
        "conv_alpha": f"{NOT_SUPPORTED}: adapters train linear layers only",
        "lokr_full_rank": f"{NOT_SUPPORTED}: lokr's w2 is low-rank below half its size (lokr_decompose_both for w1)",
        "network_kwargs": f"{NOT_SUPPORTED}: lora_targets names module suffixes instead",
        "transformer_only": f"{NOT_NEEDED}: only the denoiser gets an adapter",
    }
    drop_all(draft, f"{peer}.", net, reasons)


def _min_snr(draft: Draft, peer: str, train: dict[str, Any]) -> None:
    """train.min_snr_gamma as snr_gamma: ai-toolkit weights no loss by SNR at 0, null or without
    it (its own fixed `snr_gamma` weighting aside), so a family with min-SNR here gets null, not
    lorastudio's default."""
    gamma = train.get("min_snr_gamma")
    if "min_snr_gamma" in train and (gamma is None or values.is_off(gamma)):
        if peer_defaults.weights_snr(draft):
            draft.set(f"{peer}.min_snr_gamma", "snr_gamma", None, "0 = off: null (SDXL's default here is 5)")
        else:
            draft.drop(f"{peer}.min_snr_gamma", f"{NOT_NEEDED}: 0 is off")
    elif "min_snr_gamma" in train:
        carry(draft, f"{peer}.min_snr_gamma", gamma, "snr_gamma", values.number)
    elif "snr_gamma" not in train:
        peer_defaults.no_snr(draft, f"{peer}.min_snr_gamma", peer_defaults.AITOOLKIT_SNR)


def _train(draft: Draft, peer: str, train: dict[str, Any]) -> None:
    """train: steps, batch, learning rate and schedule, optimizer and its params, checkpointing, precision, EMA, timesteps, loss, DOP."""
    simple = (("steps", "steps", values.integer), ("batch_size", "batch_size", values.integer),
              ("gradient_accumulation_steps", "grad_accum", values.integer),
              ("gradient_accumulation", "grad_accum", values.integer), ("lr", "learning_rate", values.number),
              ("lr_scheduler", "lr_scheduler", values.scheduler), ("max_grad_norm", "max_grad_norm", values.number),
              ("noise_offset", "noise_offset", values.number),
              ("train_text_encoder", "train_text_encoder", values.flag), ("seed", "seed", values.integer))  # fmt: skip
    for key, ours, conv in simple:
        if key in train:
            carry(draft, f"{peer}.{key}", train[key], ours, conv)
    _min_snr(draft, peer, train)
    chosen = None
    if "optimizer" in train:
        got = carry(draft, f"{peer}.optimizer", train["optimizer"], "optimizer", lambda v: values.optimizer(v)[0],
                    _how(values.optimizer, train["optimizer"]))  # fmt: skip
        chosen = got
    params = train.get("optimizer_params")
    if isinstance(params, dict):
        optimizer_args(draft, f"{peer}.optimizer_params", chosen, params)
    if "gradient_checkpointing" in train:
        carry(draft, f"{peer}.gradient_checkpointing", train["gradient_checkpointing"], "gradient_checkpointing",
              lambda v: "full" if values.flag(v) else "off")  # fmt: skip
    if "dtype" in train:
        _precision(draft, f"{peer}.dtype", train["dtype"])
    ema = train.get("ema_config")
    if isinstance(ema, dict):
        if ema.get("use_ema") is True:
            carry(
                draft, f"{peer}.ema_config.ema_decay", ema.get("ema_decay", 0.999), "ema_decay", values.number
            )
            draft.drop(f"{peer}.ema_config.use_ema", f"{NOT_NEEDED}: ema_decay set turns EMA on")
        else:
            draft.drop(f"{peer}.ema_config", f"{NOT_NEEDED}: EMA is off by default")
    if "timestep_type" in train:
        kind = str(train["timestep_type"]).lower()
        ours = {"sigmoid": "sigmoid", "linear": "uniform", "lognorm_blend": None, "weighted": None}.get(kind)
        if ours is None:
            draft.drop(
                f"{peer}.timestep_type",
                f"{NOT_SUPPORTED}: timestep_sampling is logit_normal, uniform or sigmoid",
            )
        else:
            draft.set(f"{peer}.timestep_type", "timestep_sampling", ours)
    if "loss_type" in train:
        carry(draft, f"{peer}.loss_type", train["loss_type"], "loss", _loss)
    _preservation(draft, peer, train)
    reasons = {
        "train_unet": f"{NOT_NEEDED}: the denoiser always gets the adapter",
        "noise_scheduler": f"{NOT_NEEDED}: the family's objective (flow matching or DDPM) is fixed",
        "linear_timesteps": f"{NOT_SUPPORTED}: a loss weighting by timestep",
        "skip_first_sample": f"{NOT_NEEDED}: no sample round before the first step",
        "disable_sampling": f"{NOT_NEEDED}: samples are rendered only with sample_prompts",
        "cache_text_embeddings": f"{NOT_NEEDED}: captions are encoded once, before training",
        "unload_text_encoder": f"{NOT_NEEDED}: text encoders leave the GPU after phase 1",
        "content_or_style": f"{NOT_SUPPORTED}: timestep_sampling / logit_mean shape the noise levels",
        "switch_boundary_every": f"{NOT_NEEDED}: for Wan 2.2's two experts",
    }
    drop_all(draft, f"{peer}.", train, reasons)


def _preservation(draft: Draft, peer: str, train: dict[str, Any]) -> None:
    """ai-toolkit's differential output preservation (DOP) -> our `preservation` table."""
    keys = [k for k in ("diff_output_preservation", "diff_output_preservation_class",
                        "diff_output_preservation_multiplier") if k in train]  # fmt: skip
    if train.get("diff_output_preservation") is not True:
        for key in keys:
            draft.drop(f"{peer}.{key}", f"{NOT_NEEDED}: differential output preservation is off")
        return
    try:
        table = {"class_word": values.text(train.get("diff_output_preservation_class", "person")),
                 "weight": values.number(train.get("diff_output_preservation_multiplier", 1.0))}  # fmt: skip
    except values.Skip as why:
        for key in keys:
            draft.drop(f"{peer}.{key}", str(why))
        return
    how = "" if "diff_output_preservation_class" in train else "ai-toolkit's default class word, person"
    draft.set(f"{peer}.diff_output_preservation", "preservation", table, how)
    for key in keys[1:]:
        draft.fold(f"{peer}.{key}", "preservation", train[key], label=f"preservation.{key.rsplit('_', 1)[1]}")


def _how(fn: Any, value: Any) -> str:
    """How `fn`'s mapping of `value` differs (its second item), or "" when it refuses it."""
    try:
        return fn(value)[1]
    except values.Skip:
        return ""


def _precision(draft: Draft, peer: str, raw: Any) -> None:
    """train.dtype: fp16 / fp32 as base_precision; bf16 is what auto does (not needed)."""
    try:
        ours, note = values.compute_precision(raw)
    except values.Skip as why:
        draft.drop(peer, str(why))
        return
    if ours is None:
        draft.drop(peer, note)
    elif "base_precision" not in draft.settings:
        draft.set(peer, "base_precision", ours)
    else:
        draft.drop(peer, f"{NOT_NEEDED}: the quantised base computes in bf16")


def _loss(value: Any) -> str:
    """Our loss for ai-toolkit's loss_type. Raises values.Skip."""
    name = values.text(value).lower()
    found = {
        "mse": "mse",
        "l2": "mse",
        "mae": "l1",
        "l1": "l1",
        "huber": "huber",
        "smooth_l1": "smooth_l1",
    }.get(name)
    if found is None:
        raise values.Skip(f"{NOT_SUPPORTED}: losses are mse, l1, huber and smooth_l1")
    return found


def _save(draft: Draft, peer: str, save: dict[str, Any]) -> None:
    """save: the LoRA's dtype, the snapshot cadence and how many are kept."""
    if "dtype" in save:
        carry(draft, f"{peer}.dtype", save["dtype"], "save_dtype", values.save_dtype)
    if "save_every" in save:
        carry(draft, f"{peer}.save_every", save["save_every"], "save_lora_every", values.integer)
    if "max_step_saves_to_keep" in save:
        carry(
            draft,
            f"{peer}.max_step_saves_to_keep",
            save["max_step_saves_to_keep"],
            "keep_loras",
            values.integer,
        )
    reasons = {
        "push_to_hub": f"{NOT_NEEDED}: `lorastudio lora push` uploads a LoRA after the run",
        "hf_repo_id": f"{NOT_NEEDED}: `lorastudio lora push` names the repository",
        "hf_private": f"{NOT_NEEDED}: `lorastudio lora push` chooses",
        "save_format": f"{NOT_NEEDED}: LoRA files are .safetensors",
    }
    drop_all(draft, f"{peer}.", save, reasons)


def _datasets(draft: Draft, peer: str, datasets: Any) -> None:
    """datasets: the [[datasets]] entries (aitoolkit_data.py)."""
    from lorastudio.config_import.aitoolkit_data import dataset_entries

    dataset_entries(draft, peer, datasets)
