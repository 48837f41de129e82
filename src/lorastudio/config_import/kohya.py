"""kohya sd-scripts' / musubi-tuner's train_network arguments (a `--config_file` TOML, flat or in
`[*_arguments]` sections, or the kohya_ss GUI's JSON) -> lorastudio settings (no torch).

The family comes from `--family`, else the network module (networks.lora_flux, musubi-tuner's
lora_qwen_image, lora_zimage, lora_flux_2), the GUI's sdxl / flux1_checkbox, or the model's name;
networks.lora (SD 1.x and SDXL alike) with a name that says neither asks for --family. The data
comes from dataset_config (its TOML read: kohya_data.py), else train_data_dir (its N_name
folders: kohya_folders = true) with reg_data_dir as a regularisation entry.
"""

from __future__ import annotations

from typing import Any

from lorastudio.config_import import kohya_data, values
from lorastudio.config_import.common import base_model, carry, optimizer_args, parse_args
from lorastudio.config_import.kohya_tables import NEEDLESS, SIMPLE, UNSUPPORTED, needless, unset, unsupported
from lorastudio.config_import.report import NOT_NEEDED, NOT_SUPPORTED, Draft

_MODULES = {  # network_module -> family (None: a family lorastudio does not train)
    "networks.lora_flux": "flux", "networks.lora_flux_2": "flux2", "networks.lora_qwen_image": "qwen-image",
    "networks.lora_zimage": "z-image", "networks.lora_chroma": "chroma", "networks.lora_sd3": None,
    "networks.lora_lumina": None, "networks.lora_hunyuan_image": None, "networks.lora_wan": None,
    "networks.lora_framepack": None, "networks.lora_hv": None, "networks.oft": None, "networks.lora_fa": None,
}  # fmt: skip
_ALGOS = {"lora": ("lora", ""), "locon": ("lora", "LoCon's conv layers are not trained: linear layers only"),
          "lokr": ("lokr", ""), "loha": ("loha", "")}  # fmt: skip


def items(data: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """argument -> (its key in the file, value): sd-scripts' sectioned TOML ([model_arguments] ...)
    flattened, as sd-scripts reads it."""
    out: dict[str, tuple[str, Any]] = {}
    for key, value in data.items():
        if isinstance(value, dict) and key not in ("sample_prompts",):
            for inner, v in value.items():
                out[str(inner)] = (f"{key}.{inner}", v)
        else:
            out[str(key)] = (str(key), value)
    return out


def build(draft: Draft, data: dict[str, Any], family: str | None) -> None:
    """Map the kohya arguments `data` into `draft`."""
    args = items(data)
    for name, (peer, value) in list(args.items()):
        if value is None or value == "" or value == []:
            draft.drop(peer, unset())
            del args[name]
    _family_and_model(draft, args, family)
    _adapter(draft, args)
    _optimizer(draft, args)
    _objective(draft, args)
    kohya_data.data(draft, args)
    for name, (peer, value) in args.items():
        if name in SIMPLE and name not in _DONE:
            ours, conv = SIMPLE[name]
            carry(draft, peer, value, ours, conv)
        elif name in NEEDLESS:
            draft.drop(peer, needless(name))
        elif name in UNSUPPORTED:
            draft.drop(peer, unsupported(name))
    draft.unread(data)


_DONE = frozenset({"lr_scheduler"})  # mapped with their neighbours, not from SIMPLE


def _take(args: dict[str, tuple[str, Any]], name: str) -> tuple[str, Any] | None:
    return args.pop(name, None)


def _family_and_model(draft: Draft, args: dict[str, tuple[str, Any]], family: str | None) -> None:
    model = _take(args, "pretrained_model_name_or_path")
    dit = _take(args, "dit")
    base = dit or model
    if base is not None:
        how = ("musubi-tuner's DiT file: read as a single-file checkpoint, its other components from base_config"
               if dit else "")  # fmt: skip
        base_model(draft, base[0], base[1], how)
    if dit and model:
        draft.drop(model[0], f"{NOT_NEEDED}: the DiT file is the base")
    found, source, how = None, None, ""
    module = args.get("network_module")
    if module is not None and str(module[1]) in _MODULES:
        found, source = _MODULES[str(module[1])], module[0]
        if found is None:
            draft.fail(
                module[0], f"{module[1]!r} trains a model family lorastudio does not (`lorastudio families`)"
            )
            return
        if found == "flux" and str(args.get("model_type", ("", ""))[1]).lower() == "chroma":
            found = "chroma"
        if found == "qwen-image" and _truthy(args.get("edit")):
            found = "qwen-image-edit"
        if found == "flux2" and "klein" in str(args.get("model_version", ("", ""))[1]).lower():
            found = "flux2-klein"
    for key, fam in (("sdxl", "sdxl"), ("flux1_checkbox", "flux")):
        flag = _take(args, key)
        if flag is not None:
            if found is None and _truthy(flag):
                found, source = fam, flag[0]
            else:
                draft.drop(flag[0], f"{NOT_NEEDED}: the family is {found or 'named otherwise'}")
    for key in ("model_type", "edit", "model_version", "v2"):
        if key in args:
            peer, value = args.pop(key)
            draft.drop(peer, f"{NOT_NEEDED}: read for the family" if key != "v2" or not _truthy((peer, value))
                       else f"{NOT_SUPPORTED}: SD 2.x is not a family lorastudio trains")  # fmt: skip
    if found is None and base is not None and (found := values.family_of(base[1])) is not None:
        source, how = base[0], "the family named by the model's name"
    if family is not None:
        draft.set("--family", "family", family)
    elif found is not None and source is not None:
        draft.set(source, "family", found, how)
    else:
        draft.fail(
            "network_module", "names no family lorastudio trains: pass --family (`lorastudio families`)"
        )


def _truthy(item: tuple[str, Any] | None) -> bool:
    if item is None:
        return False
    try:
        return values.flag(item[1])
    except values.Skip:
        return False


def _adapter(draft: Draft, args: dict[str, tuple[str, Any]]) -> None:
    module = _take(args, "network_module")
    raw = _take(args, "network_args")
    net = parse_args(draft, raw[0], raw[1]) if raw else {}
    algo = str(net.pop("algo", "lora")).lower()
    gui = _take(args, "LoRA_type")
    if module is not None:
        name = str(module[1])
        if name == "lycoris.kohya":
            if algo in _ALGOS:
                draft.set(module[0], "adapter", _ALGOS[algo][0], _ALGOS[algo][1])
                if raw:
                    draft.fold(f"{raw[0]}.algo", "adapter", algo)
            else:
                draft.drop(
                    module[0], f"{NOT_SUPPORTED}: LyCORIS {algo}: adapters here are lora, dora, loha, lokr"
                )
        elif name in _MODULES or name == "networks.lora":
            draft.drop(module[0], f"{NOT_NEEDED}: the family's adapter targets (adapter = lora)")
        else:
            draft.drop(module[0], f"{NOT_SUPPORTED}: adapters here are lora, dora, loha and lokr")
    if gui is not None:
        kind = str(gui[1]).lower()
        ours = "lokr" if "lokr" in kind else "loha" if "loha" in kind else "dora" if "dora" in kind else None
        if ours and "adapter" not in draft.settings:
            draft.set(gui[0], "adapter", ours)
        else:
            draft.drop(gui[0], f"{NOT_NEEDED}: adapter = {draft.settings.get('adapter', 'lora')}")
    for key, value in net.items():
        where = f"{raw[0]}.{key}" if raw else key
        if key == "factor":
            carry(draft, where, value, "lokr_factor", values.integer)
        elif key == "dora_wd" and _truthy((where, value)):
            draft.set(where, "adapter", "dora")
        elif key == "dropout":
            carry(draft, where, value, "lora_dropout", values.number)
        elif key in ("conv_dim", "conv_alpha"):
            draft.drop(where, f"{NOT_SUPPORTED}: adapters train linear layers only")
        elif key in ("preset", "train_blocks", "exclude_patterns", "include_patterns", "target_modules"):
            draft.drop(where, f"{NOT_SUPPORTED}: lora_targets names module suffixes instead")
        else:
            draft.drop(where, f"{NOT_SUPPORTED}: a network argument lorastudio has no setting for")


def _optimizer(draft: Draft, args: dict[str, tuple[str, Any]]) -> None:
    chosen = None
    opt = _take(args, "optimizer_type") or _take(args, "optimizer")
    if opt is not None:
        try:
            chosen, how = values.optimizer(opt[1])
            draft.set(opt[0], "optimizer", chosen, how)
        except values.Skip as why:
            draft.drop(opt[0], str(why))
    raw = _take(args, "optimizer_args")
    if raw is not None:
        optimizer_args(draft, raw[0], chosen, parse_args(draft, raw[0], raw[1]))
    lr, unet = _take(args, "learning_rate"), _take(args, "unet_lr")
    if unet is not None:
        carry(draft, unet[0], unet[1], "learning_rate", values.number)
        if lr is not None:
            draft.drop(lr[0], f"{NOT_NEEDED}: unet_lr is the denoiser's learning rate")
    elif lr is not None:
        carry(draft, lr[0], lr[1], "learning_rate", values.number)
    sched = _take(args, "lr_scheduler")
    if sched is not None:
        carry(draft, sched[0], sched[1], "lr_scheduler", values.scheduler)
    norm = _take(args, "max_grad_norm")
    if norm is not None:
        try:
            value = values.number(norm[1])
            draft.set(
                norm[0], "max_grad_norm", value if value > 0 else None, "" if value > 0 else "0 = off: null"
            )
        except values.Skip as why:
            draft.drop(norm[0], str(why))
    unet_only = _take(args, "network_train_unet_only")
    if unet_only is not None:
        if draft.settings.get("family") == "sdxl":
            carry(draft, unet_only[0], unet_only[1], "train_text_encoder", lambda v: not values.flag(v))
        else:
            draft.drop(unet_only[0], f"{NOT_NEEDED}: only the denoiser gets an adapter")


def _objective(draft: Draft, args: dict[str, tuple[str, Any]]) -> None:
    loss = _take(args, "loss_type")
    if loss is not None:
        names = {"l2": "mse", "mse": "mse", "l1": "l1", "huber": "huber", "smooth_l1": "smooth_l1"}
        carry(
            draft,
            loss[0],
            loss[1],
            "loss",
            lambda v: names.get(str(v).lower()) or _skip("losses: mse, l1, huber, smooth_l1"),
        )
    schedule = _take(args, "huber_schedule")
    if schedule is not None:
        carry(draft, schedule[0], schedule[1], "huber_schedule", lambda v: str(v).lower())
    sampling, shift = _take(args, "timestep_sampling"), _take(args, "discrete_flow_shift")
    if sampling is not None:
        kind = str(sampling[1]).lower()
        ours = {"uniform": "uniform", "sigmoid": "sigmoid", "shift": "sigmoid", "flux_shift": "sigmoid",
                "qwen_shift": "sigmoid", "logit_normal": "logit_normal"}.get(kind)  # fmt: skip
        how = {"flux_shift": "without FLUX's resolution-dependent shift (flow_shift: a fixed one)",
               "qwen_shift": "with the shift the family's pipeline uses for the image size"}.get(kind, "")  # fmt: skip
        if ours is None:
            draft.drop(sampling[0], f"{NOT_SUPPORTED}: timestep_sampling is logit_normal, uniform or sigmoid")
        else:
            draft.set(sampling[0], "timestep_sampling", ours, how)
        if shift is not None and kind == "shift":
            carry(draft, shift[0], shift[1], "flow_shift", values.number)
            shift = None
    if shift is not None:
        draft.drop(shift[0], f"{NOT_NEEDED}: kohya applies it with timestep_sampling = shift only")
    weighting = _take(args, "weighting_scheme")
    if weighting is not None:
        if str(weighting[1]).lower() == "logit_normal":
            draft.set(
                weighting[0],
                "timestep_sampling",
                "logit_normal",
                "the levels drawn logit-normal, not weighted",
            )
            for key in ("logit_mean", "logit_std"):
                if (got := _take(args, key)) is not None:
                    carry(draft, got[0], got[1], key, values.number)
        elif str(weighting[1]).lower() == "none":
            draft.drop(weighting[0], f"{NOT_NEEDED}: no loss weighting by default")
        else:
            draft.drop(weighting[0], f"{NOT_SUPPORTED}: min-SNR (snr_gamma) is the one loss weighting")
    for key in ("logit_mean", "logit_std"):
        if (got := _take(args, key)) is not None:
            draft.drop(got[0], f"{NOT_NEEDED}: kohya reads it with weighting_scheme = logit_normal only")
    pred = _take(args, "model_prediction_type")
    if pred is not None:
        draft.drop(pred[0], f"{NOT_NEEDED}: the denoiser's output is the prediction" if str(pred[1]) == "raw"
                   else f"{NOT_SUPPORTED}: the denoiser's output is the prediction (raw)")  # fmt: skip
    ckpt = _take(args, "gradient_checkpointing")
    if ckpt is not None:
        carry(
            draft, ckpt[0], ckpt[1], "gradient_checkpointing", lambda v: "full" if values.flag(v) else "off"
        )
    precision = _take(args, "mixed_precision")
    fp8 = _take(args, "fp8_base")
    if fp8 is not None and _truthy(fp8):
        draft.set(fp8[0], "base_precision", "int8", values.EIGHT_BIT)
    elif fp8 is not None:
        draft.drop(fp8[0], f"{NOT_NEEDED}: off by default")
    if precision is not None:
        try:
            ours, note = values.compute_precision(precision[1])
        except values.Skip as why:
            draft.drop(precision[0], str(why))
        else:
            if ours is None or "base_precision" in draft.settings:
                draft.drop(precision[0], note or f"{NOT_NEEDED}: the quantised base computes in bf16")
            else:
                draft.set(precision[0], "base_precision", ours)
    log = _take(args, "log_with")
    if log is not None:
        kinds = {"tensorboard": ["tensorboard"], "wandb": ["wandb"], "all": ["tensorboard", "wandb"]}
        carry(
            draft,
            log[0],
            log[1],
            "report_to",
            lambda v: kinds.get(str(v).lower()) or _skip("tensorboard, wandb"),
        )


def _skip(what: str) -> Any:
    raise values.Skip(f"{NOT_SUPPORTED}: {what}")
