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

from lorastudio.config_import import kohya_data, peer_defaults, values
from lorastudio.config_import.common import base_model, carry, init_lora, optimizer_args, parse_args
from lorastudio.config_import.kohya_objective import objective, take, truthy
from lorastudio.config_import.kohya_tables import (
    INIT_LORA,
    NEEDLESS,
    SIMPLE,
    UNSUPPORTED,
    ZERO_OFF,
    needless,
    unset,
    unsupported,
)
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
    objective(draft, args)
    kohya_data.data(draft, args)
    for name, (peer, value) in args.items():
        if name == "min_snr_gamma" and values.is_off(value) and draft.settings.get("family") == "sdxl":
            # kohya's 0 is no min-SNR weighting; left out, SDXL's default here (5) would weight it
            draft.set(peer, "snr_gamma", None, "0 = off: null (SDXL's default here is 5)")
        elif name in ZERO_OFF and values.is_off(value):
            draft.drop(peer, f"{NOT_NEEDED}: 0 is unset")
        elif name in INIT_LORA:
            init_lora(draft, peer, value)
        elif name in SIMPLE and name not in _DONE:
            ours, conv = SIMPLE[name]
            carry(draft, peer, value, ours, conv)
        elif name in NEEDLESS:
            draft.drop(peer, needless(name))
        elif name in UNSUPPORTED:
            draft.drop(peer, unsupported(name, value))
    if "min_snr_gamma" not in args:  # absent or empty: sd-scripts weights no loss by SNR
        peer_defaults.no_snr(draft, "min_snr_gamma", peer_defaults.KOHYA_SNR)
    draft.unread(data)


_DONE = frozenset({"lr_scheduler"})  # mapped with their neighbours, not from SIMPLE


def _family_and_model(draft: Draft, args: dict[str, tuple[str, Any]], family: str | None) -> None:
    """The base (pretrained_model_name_or_path, or musubi-tuner's dit) and the family (see the module's docstring)."""
    model = take(args, "pretrained_model_name_or_path")
    dit = take(args, "dit")
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
        if found == "qwen-image" and truthy(args.get("edit")):
            found = "qwen-image-edit"
        if found == "flux2" and "klein" in str(args.get("model_version", ("", ""))[1]).lower():
            found = "flux2-klein"
    for key, fam in (("sdxl", "sdxl"), ("flux1_checkbox", "flux")):
        flag = take(args, key)
        if flag is not None:
            if found is None and truthy(flag):
                found, source = fam, flag[0]
            else:
                draft.drop(flag[0], f"{NOT_NEEDED}: the family is {found or 'named otherwise'}")
    for key in ("model_type", "edit", "model_version", "v2"):
        if key in args:
            peer, value = args.pop(key)
            draft.drop(peer, f"{NOT_NEEDED}: read for the family" if key != "v2" or not truthy((peer, value))
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


def _adapter(draft: Draft, args: dict[str, tuple[str, Any]]) -> None:
    """network_module / network_args (and the GUI's LoRA_type and LyCORIS fields) as our adapter and its options."""
    module = take(args, "network_module")
    raw = take(args, "network_args")
    net = parse_args(draft, raw[0], raw[1]) if raw else {}
    algo = str(net.pop("algo", "lora")).lower()
    gui = take(args, "LoRA_type")
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
    given = [(f"{raw[0]}.{k}" if raw else k, k, v) for k, v in net.items()]
    given += [(peer, k, v) for k in _GUI_NETWORK if (got := take(args, k)) is not None for peer, v in [got]]
    for where, key, value in given:
        _network_arg(draft, where, key, value)


_GUI_NETWORK = (  # the kohya_ss GUI's LyCORIS fields, top-level keys of its JSON
    "factor", "decompose_both", "dora_wd", "conv_dim", "conv_alpha", "use_tucker", "use_cp", "use_scalar",
    "rank_dropout", "module_dropout", "rank_dropout_scale", "train_norm", "bypass_mode", "constrain", "rescaled",
    "LyCORIS_preset", "train_blocks",
)  # fmt: skip


def _network_arg(draft: Draft, where: str, key: str, value: Any) -> None:
    """One network argument (kohya's network_args item, or the GUI's field of the same name)."""
    adapter = draft.settings.get("adapter", "lora")
    off = values.is_off(value)
    if key == "factor" and adapter == "lokr":
        carry(draft, where, value, "lokr_factor", values.integer)
    elif key == "decompose_both" and adapter == "lokr":
        carry(draft, where, value, "lokr_decompose_both", values.flag)
    elif key == "dora_wd" and truthy((where, value)):
        draft.set(where, "adapter", "dora")
    elif key == "dropout":
        carry(draft, where, value, "lora_dropout", values.number)
    elif key in ("factor", "decompose_both", "dora_wd") or off:
        draft.drop(where, f"{NOT_NEEDED}: off, or not for adapter = {adapter}")
    elif key in ("conv_dim", "conv_alpha"):
        draft.drop(where, f"{NOT_SUPPORTED}: adapters train linear layers only")
    elif key in (
        "preset",
        "LyCORIS_preset",
        "train_blocks",
        "exclude_patterns",
        "include_patterns",
        "target_modules",
    ):
        draft.drop(where, f"{NOT_SUPPORTED}: lora_targets names module suffixes instead")
    else:
        draft.drop(where, f"{NOT_SUPPORTED}: a network argument lorastudio has no setting for")


def _optimizer(draft: Draft, args: dict[str, tuple[str, Any]]) -> None:
    """optimizer_type and its args, the learning rates, the schedule, max_grad_norm, network_train_unet_only."""
    chosen = None
    opt = take(args, "optimizer_type") or take(args, "optimizer")
    if opt is not None:
        try:
            chosen, how = values.optimizer(opt[1])
            draft.set(opt[0], "optimizer", chosen, how)
        except values.Skip as why:
            draft.drop(opt[0], str(why))
    raw = take(args, "optimizer_args")
    if raw is not None:
        optimizer_args(draft, raw[0], chosen, parse_args(draft, raw[0], raw[1]))
    lr, unet = take(args, "learning_rate"), take(args, "unet_lr")
    if unet is not None:
        carry(draft, unet[0], unet[1], "learning_rate", values.number)
        if lr is not None:
            draft.drop(lr[0], f"{NOT_NEEDED}: unet_lr is the denoiser's learning rate")
    elif lr is not None:
        carry(draft, lr[0], lr[1], "learning_rate", values.number)
    _warmup_percent(draft, args)
    sched = take(args, "lr_scheduler")
    if sched is not None:
        carry(draft, sched[0], sched[1], "lr_scheduler", values.scheduler)
    norm = take(args, "max_grad_norm")
    if norm is not None:
        try:
            value = values.number(norm[1])
            draft.set(
                norm[0], "max_grad_norm", value if value > 0 else None, "" if value > 0 else "0 = off: null"
            )
        except values.Skip as why:
            draft.drop(norm[0], str(why))
    unet_only = take(args, "network_train_unet_only")
    if unet_only is not None:
        if draft.settings.get("family") == "sdxl":
            carry(draft, unet_only[0], unet_only[1], "train_text_encoder", lambda v: not values.flag(v))
        else:
            draft.drop(unet_only[0], f"{NOT_NEEDED}: only the denoiser gets an adapter")


def _warmup_percent(draft: Draft, args: dict[str, tuple[str, Any]]) -> None:
    """The kohya_ss GUI's lr_warmup: a percentage of the run's steps, as lr_warmup_steps when the
    file gives the steps (and no epochs, whose steps depend on the dataset)."""
    warm = take(args, "lr_warmup")
    if warm is None:
        return
    if values.is_off(warm[1]):
        draft.drop(warm[0], f"{NOT_NEEDED}: 0 is no warmup")
        return
    steps, epochs = args.get("max_train_steps"), args.get("max_train_epochs") or args.get("epoch")
    try:
        percent = values.number(warm[1])
        if steps is None or (epochs is not None and not values.is_off(epochs[1])):
            raise values.Skip(
                f"{NOT_SUPPORTED}: a percentage of a run whose steps the dataset sets: set lr_warmup_steps"
            )
        total = values.integer(steps[1])
    except values.Skip as why:
        draft.drop(warm[0], str(why))
        return
    draft.set(
        warm[0], "lr_warmup_steps", round(percent / 100 * total), f"{percent}% of max_train_steps {total}"
    )
