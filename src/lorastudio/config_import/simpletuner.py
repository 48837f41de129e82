"""SimpleTuner's config.json (keys with or without their "--") and the multidatabackend.json it
names -> lorastudio settings, main keys (no torch). Read from SimpleTuner's own examples
(simpletuner/examples/<model>.peft-lora/config.json, multidatabackend examples)."""

from __future__ import annotations

from typing import Any

from lorastudio.config_import import peer_defaults, values
from lorastudio.config_import.common import base_model, carry, drop_all, folder, side_path_above, simple
from lorastudio.config_import.reading import read_document
from lorastudio.config_import.report import NOT_NEEDED, NOT_SUPPORTED, Draft, Line
from lorastudio.config_import.simpletuner_lycoris import lycoris_settings, main_keys_taken

_FAMILIES = {"flux": "flux", "sdxl": "sdxl", "qwen_image": "qwen-image", "z_image": "z-image", "zimage": "z-image",
             "chroma": "chroma", "flux2": "flux2", "kontext": "flux-kontext"}  # fmt: skip
_DEFAULT_BASES = {  # SimpleTuner's default model of a family, without pretrained_model_name_or_path
    "flux": "black-forest-labs/FLUX.1-dev",
    "sdxl": "stabilityai/stable-diffusion-xl-base-1.0",
    "qwen-image": "Qwen/Qwen-Image",
}
_SIMPLE = {
    "lora_rank": ("lora_rank", values.integer), "lora_alpha": ("lora_alpha", values.number),
    "lora_dropout": ("lora_dropout", values.number), "learning_rate": ("learning_rate", values.number),
    "lr_scheduler": ("lr_scheduler", values.scheduler), "lr_warmup_steps": ("lr_warmup_steps", values.integer),
    "max_train_steps": ("steps", values.integer), "train_batch_size": ("batch_size", values.integer),
    "gradient_accumulation_steps": ("grad_accum", values.integer), "seed": ("seed", values.integer),
    "max_grad_norm": ("max_grad_norm", values.number), "noise_offset": ("noise_offset", values.number),
    "snr_gamma": ("snr_gamma", values.number), "flow_schedule_shift": ("flow_shift", values.number),
    "caption_dropout_probability": ("caption_dropout", values.number), "resolution": ("resolution", values.integer),
    "validation_steps": ("sample_every", values.integer), "validation_seed": ("sample_seed", values.integer),
    "validation_num_inference_steps": ("sample_steps", values.integer),
    "checkpointing_steps": ("save_every", values.integer), "checkpoint_step_interval": ("save_every", values.integer),
    "checkpoints_total_limit": ("keep_last", values.integer), "ema_decay": ("ema_decay", values.number),
}  # fmt: skip
_NEEDLESS = {
    "output_dir": "each run is written under the studio home's outputs/<output_name>",
    "push_to_hub": "`lorastudio lora push` uploads a LoRA after the run",
    "push_checkpoints_to_hub": "`lorastudio lora push` uploads a LoRA after the run",
    "hub_model_id": "`lorastudio lora push` names the repository",
    "tracker_project_name": "trackers name the run by its output_name",
    "tracker_run_name": "trackers name the run by its output_name",
    "vae_batch_size": "the VAE encodes in batches of its own",
    "quantize_via": "the base is quantised as it loads",
    "disable_bucket_pruning": "every image is trained",
    "fuse_qkv_projections": "fuse_projections auto decides",
    "controlnet": "lorastudio trains LoRA-family adapters",
    "num_eval_images": "validation_split holds images out",
    "validation_prompt_library": "sample_prompts are the run's",
    "validation_disable_unconditional": "samples render the prompt only",
    "validation_guidance_rescale": "samples render the family's way",
}


def build(draft: Draft, data: dict[str, Any], family: str | None) -> None:
    """Map SimpleTuner's `data` into `draft`."""
    args = {str(k).removeprefix("--"): v for k, v in data.items()}
    names = {str(k).removeprefix("--"): str(k) for k in data}
    root = ""
    raw_family, flavour = args.pop("model_family", None), str(args.pop("model_flavour", "") or "")
    found = _FAMILIES.get(str(raw_family).lower()) if raw_family is not None else None
    if found == "flux" and "kontext" in flavour:
        found = "flux-kontext"
    if found == "qwen-image" and "edit" in flavour:
        found = "qwen-image-edit"
    if found == "flux2" and "klein" in flavour:
        found = "flux2-klein"
    if flavour:
        draft.drop(names["model_flavour"], f"{NOT_NEEDED}: read for the family")
    if family is not None:
        draft.set("--family", "family", family)
    elif found is not None:
        draft.set(names["model_family"], "family", found)
    else:
        draft.fail(names.get("model_family", "model_family"), f"{raw_family!r} is not a family lorastudio trains:"
                   " pass --family (`lorastudio families`)")  # fmt: skip
    if "pretrained_model_name_or_path" in args:
        base_model(draft, names["pretrained_model_name_or_path"], args.pop("pretrained_model_name_or_path"))
    elif found in _DEFAULT_BASES and family is None:
        draft.set(
            names["model_family"],
            "base_model",
            _DEFAULT_BASES[found],
            "SimpleTuner's default model of the family",
        )
    lycoris = str(args.get("lora_type", "")).lower() == "lycoris"
    if lycoris and "lycoris_config" in args:
        main_keys_taken(draft, args, names)
    if "snr_gamma" in args and (args["snr_gamma"] is None or values.is_off(args["snr_gamma"])):
        args.pop("snr_gamma")  # SimpleTuner's 0 (or null) is no SNR weighting: off, not our default
        if peer_defaults.weights_snr(draft):
            draft.set(names["snr_gamma"], "snr_gamma", None, "0 = off: null (SDXL's default here is 5)")
        else:
            draft.drop(names["snr_gamma"], f"{NOT_NEEDED}: 0 is off")
    for key in list(_SIMPLE):
        if key in args:
            ours, conv = _SIMPLE[key]
            carry(draft, names[key], args.pop(key), ours, conv)
    if "snr_gamma" not in names:
        peer_defaults.no_snr(draft, "snr_gamma", peer_defaults.SIMPLETUNER_SNR)
    _default_shift(draft, args, names)
    _switches(draft, args, names)
    _validation(draft, args, names)
    if "data_backend_config" in args:
        _backends(draft, names["data_backend_config"], args.pop("data_backend_config"))
    drop_all(
        draft,
        root,
        {names[k]: v for k, v in args.items()},
        {names[k]: f"{NOT_NEEDED}: {w}" for k, w in _NEEDLESS.items() if k in names},
    )
    draft.unread(data)


def _default_shift(draft: Draft, args: dict[str, Any], names: dict[str, str]) -> None:
    """flow_shift 3.0, SimpleTuner's default flow_schedule_shift, for a file that leaves it unset
    (a family whose SimpleTuner model draws its levels the common way; not with
    flow_schedule_auto_shift or flux_fast_schedule on, whose levels are not carried here)."""
    family = draft.settings.get("family")
    if "flow_schedule_shift" in names or family not in peer_defaults.SIMPLETUNER_SHIFT_FAMILIES:
        return
    if any(
        str(args.get(k, "")).lower() in ("true", "1")
        for k in ("flow_schedule_auto_shift", "flux_fast_schedule")
    ):
        return
    peer_defaults.fill(draft, "flow_schedule_shift", "flow_shift", 3.0, peer_defaults.SIMPLETUNER_SHIFT)


def _switches(draft: Draft, args: dict[str, Any], names: dict[str, str]) -> None:
    """optimizer, model_type, lora_type, checkpointing, EMA, precision, quantisation and trackers."""
    if "optimizer" in args:
        raw = args.pop("optimizer")
        try:
            ours, how = values.optimizer(raw)
            draft.set(names["optimizer"], "optimizer", ours, how)
        except values.Skip as why:
            draft.drop(names["optimizer"], str(why))
    if "model_type" in args:
        kind = str(args.pop("model_type")).lower()
        draft.drop(names["model_type"], f"{NOT_NEEDED}: lorastudio trains adapters" if kind == "lora" else
                   f"{NOT_SUPPORTED}: lorastudio trains adapters, not full fine-tunes")  # fmt: skip
    if "lora_type" in args:
        kind = str(args.pop("lora_type")).lower()
        if kind == "lycoris" and "lycoris_config" in args:
            draft.drop(names["lora_type"], f"{NOT_NEEDED}: the adapter is its lycoris_config's algo")
            path = side_path_above(draft, names["lycoris_config"], args.pop("lycoris_config"))
            if path is not None:
                lycoris_settings(draft, names["lycoris_config"], path)
        else:
            draft.drop(names["lora_type"], f"{NOT_NEEDED}: adapter = lora" if kind == "standard" else
                       f"{NOT_SUPPORTED}: {kind!r} without a lycoris_config")  # fmt: skip
    if "lycoris_config" in args:
        args.pop("lycoris_config")
        draft.drop(names["lycoris_config"], f"{NOT_NEEDED}: read only for lora_type lycoris")
    if "validation_lycoris_strength" in args:
        one = args.pop("validation_lycoris_strength") in (1, 1.0)
        draft.drop(names["validation_lycoris_strength"], f"{NOT_NEEDED}: samples render the adapter at strength 1"
                   if one else f"{NOT_SUPPORTED}: samples render the adapter at strength 1")  # fmt: skip
    if "gradient_checkpointing" in args:
        carry(draft, names["gradient_checkpointing"], args.pop("gradient_checkpointing"), "gradient_checkpointing",
              lambda v: "full" if values.flag(v) else "off")  # fmt: skip
    if "use_ema" in args:
        on = args.pop("use_ema")
        if on is True and "ema_decay" not in draft.settings:
            draft.set(names["use_ema"], "ema_decay", 0.995, "SimpleTuner's default decay")
        else:
            draft.drop(
                names["use_ema"],
                f"{NOT_NEEDED}: ema_decay turns EMA on" if on else f"{NOT_NEEDED}: off by default",
            )
    elif "ema_decay" in draft.settings:
        draft.refuse("ema_decay", "use_ema is off")
    if "mixed_precision" in args:
        raw = args.pop("mixed_precision")
        try:
            ours, note = values.compute_precision(raw)
            if ours:
                draft.set(names["mixed_precision"], "base_precision", ours)
            else:
                draft.drop(names["mixed_precision"], note)
        except values.Skip as why:
            draft.drop(names["mixed_precision"], str(why))
    if "base_model_precision" in args:
        raw = str(args.pop("base_model_precision"))
        if raw in ("no_change", ""):
            draft.drop(names["base_model_precision"], f"{NOT_NEEDED}: the base is not quantised by default")
        else:
            carry(draft, names["base_model_precision"], raw.split("-")[0], "base_precision",
                  lambda q: values.quantised(q)[0], f"{raw}: " + (_note(raw.split("-")[0]) or "the same kind here"))  # fmt: skip
    if "report_to" in args:
        raw = str(args.pop("report_to")).lower()
        if raw == "none":
            draft.drop(names["report_to"], f"{NOT_NEEDED}: no tracker by default")
        else:
            carry(
                draft,
                names["report_to"],
                raw,
                "report_to",
                lambda v: [v] if v in ("tensorboard", "wandb") else _skip(v),
            )


def _note(qtype: str) -> str:
    """How a quantisation name differs here, or ""."""
    try:
        return values.quantised(qtype)[1]
    except values.Skip:
        return ""


def _skip(value: Any) -> Any:
    """Raise values.Skip for a tracker lorastudio does not offer."""
    raise values.Skip(f"{NOT_SUPPORTED}: {value!r}: trackers are tensorboard and wandb")


def _validation(draft: Draft, args: dict[str, Any], names: dict[str, str]) -> None:
    """validation_prompt with its guidance and resolution as one sample prompt object."""
    prompt = args.pop("validation_prompt", None)
    if prompt is None:
        return
    if not isinstance(prompt, str) or not prompt.strip():
        draft.drop(names["validation_prompt"], "not a prompt (text)")
        return
    entry: dict[str, Any] = {"prompt": prompt}
    folded: list[str] = []
    if "validation_guidance" in args:
        try:
            entry["guidance"] = values.number(args.pop("validation_guidance"))
            folded.append("validation_guidance")
        except values.Skip as why:
            draft.drop(names["validation_guidance"], str(why))
    if "validation_resolution" in args:
        try:
            entry |= _size(args.pop("validation_resolution"))
            folded.append("validation_resolution")
        except values.Skip as why:
            draft.drop(names["validation_resolution"], str(why))
    draft.set(
        names["validation_prompt"],
        "sample_prompts",
        [entry],
        "SimpleTuner's validation prompt, as a sample prompt",
    )
    for key in folded:
        draft.fold(names[key], "sample_prompts", entry, "the sample prompt's own")
    if "validation_negative_prompt" in args:
        args.pop("validation_negative_prompt")
        draft.drop(names["validation_negative_prompt"], f"{NOT_SUPPORTED}: samples have no negative prompt")


def _size(value: Any) -> dict[str, int]:
    """SimpleTuner's validation_resolution ("1024x768", 1024) as width and height. Raises Skip."""
    if isinstance(value, str) and "x" in value:
        width, height = value.split("x", 1)
        return {"width": values.integer(width), "height": values.integer(height)}
    side = values.integer(value)
    return {"width": side, "height": side}


def _backends(draft: Draft, peer: str, value: Any) -> None:
    """data_backend_config's local image backends as [[datasets]] entries (instance_data_dir, repeats, regularisation)."""
    path = side_path_above(draft, peer, value)
    if path is None:
        return
    doc = read_document(path, where=f"{draft.file.name}: {peer}")
    draft.lines.append(
        Line(peer, "changed", "datasets", str(path), "its local image backends read as [[datasets]] entries")
    )
    if not isinstance(doc, list):
        draft.fail(peer, f"{path.name} is not a list of backends")
        return
    n = 0
    for i, backend in enumerate(doc):
        where = f"{path.name}[{i}]"
        if not isinstance(backend, dict):
            continue
        if backend.get("dataset_type") in ("text_embeds", "image_embeds"):
            draft.drop(where, f"{NOT_NEEDED}: the embedding caches are the studio's")
            continue
        if backend.get("type") != "local" or "instance_data_dir" not in backend:
            draft.drop(where, f"{NOT_SUPPORTED}: only local folders (type local, instance_data_dir) are read")
            continue
        found = folder(draft, f"{where}.instance_data_dir", backend["instance_data_dir"])
        if found is None:
            draft.drop(where, f"{NOT_SUPPORTED}: its folder is not carried")
            continue
        draft.set(f"{where}.instance_data_dir", f"datasets.{n}.path", found[0], found[1])
        if "repeats" in backend:
            carry(draft, f"{where}.repeats", backend["repeats"], f"datasets.{n}.repeats",
                  lambda r: values.integer(r) + 1, "SimpleTuner counts the passes after the first (0: once); here all")  # fmt: skip
        simple(
            draft,
            backend,
            {"is_regularisation_data": (f"datasets.{n}.regularisation", values.flag)},
            f"{where}.",
        )
        strategy = backend.get("caption_strategy")
        if strategy is not None:
            draft.drop(f"{where}.caption_strategy", f"{NOT_NEEDED}: captions are <image>.txt" if strategy == "textfile"
                       else f"{NOT_SUPPORTED}: captions are read from <image>.txt files")  # fmt: skip
        n += 1
    draft.unread(doc, path.name)
