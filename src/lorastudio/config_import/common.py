"""Mapping steps every peer module uses: a value carried through a converter, a folder path,
an optimizer's own arguments, and a table of keys with one reason each (no torch)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lorastudio.config_import import values
from lorastudio.config_import.report import NOT_NEEDED, Draft
from lorastudio.config_import.values import Skip


def carry(
    draft: Draft, peer: str, value: Any, ours: str, convert: Callable[[Any], Any] | None = None, how: str = ""
) -> Any:
    """Write the peer's `value` at `peer` as our `ours`, through `convert` (a values.* function);
    a Skip becomes a "not carried" line with its reason. Returns the value written, else None."""
    try:
        got = convert(value) if convert is not None else value
    except Skip as why:
        draft.drop(peer, str(why))
        return None
    draft.set(peer, ours, got, how)
    return got


def folder(draft: Draft, peer: str, value: Any, what: str = "folder") -> tuple[str, str] | None:
    """(the folder path `value` names, how it changed or "") for our settings: absolute as
    written (~ expanded), a relative one resolved against the peer file's folder (where the peer
    resolved it against its own working folder). A path with a '..' part refuses the import
    (draft.fail, naming the file and key): where it points depends on a folder the file does not
    name; so does a value that is no path, worded as `what` the key names ("folder", a file's
    "LoRA file"). None when it is not usable."""
    if not isinstance(value, str) or not value.strip():
        draft.fail(peer, f"{value!r} is not a {what} path")
        return None
    if values.has_dotdot(value):
        draft.fail(peer, f"the path {value!r} has a '..' part: write it without one (absolute)")
        return None
    if values.is_windows_path(value):
        draft.drop(
            peer, f"{values.NOT_SUPPORTED}: {value!r} is a Windows path (the other machine's): set it by hand"
        )
        return None
    path = Path(value).expanduser()
    if path.is_absolute():
        return str(path), ""
    if not draft.local:
        draft.drop(
            peer, f"{values.NOT_SUPPORTED} by the web import: the relative path {value!r} (set it by hand)"
        )
        return None
    resolved = draft.file.parent.resolve() / path
    return str(resolved), f"the relative path {value!r} taken against the folder of {draft.file.name}"


WEIGHT_FILES = (".safetensors", ".ckpt", ".pt", ".sft", ".gguf")


def base_model(draft: Draft, peer: str, value: Any, how: str = "") -> None:
    """The peer's model as our base_model: a hub id ("owner/name") as written; a path (absolute,
    "./", "~", or a weights file) as `folder` makes it (relative: against the peer file's folder)."""
    if not isinstance(value, str) or not value.strip():
        draft.drop(peer, f"{value!r} is not a model name or path")
        return
    looks_local = (
        value.startswith((".", "/", "~", "\\")) or value.lower().endswith(WEIGHT_FILES) or ":" in value[:3]
    )
    if not looks_local:
        draft.set(peer, "base_model", value, how)
        return
    found = folder(draft, peer, value)
    if found is not None:
        draft.set(peer, "base_model", found[0], "; ".join(h for h in (how, found[1]) if h))


def init_lora(draft: Draft, peer: str, value: Any) -> None:
    """The peer's LoRA to train on from (kohya's network_weights) as our init_lora: a path as
    `folder` makes it (relative: against the peer file's folder). The strict check that follows
    reads the file (family, adapter, rank): one it cannot read is reported as not carried."""
    found = folder(draft, peer, value, what="LoRA file")
    if found is not None:
        draft.set(peer, "init_lora", found[0], found[1])


def side_path(draft: Draft, peer: str, value: Any) -> Path | None:
    """The file `value` names inside the peer's file (kohya's dataset_config, SimpleTuner's
    data_backend_config, OneTrainer's concept_file_name, a prompt file): absolute as written,
    else against the peer file's folder. A path with a '..' part refuses the import (draft.fail);
    an upload's (draft.local false) is not read: reported as not carried. None when not read."""
    from lorastudio.config_import.reading import side_file

    if not isinstance(value, str) or values.has_dotdot(value):
        draft.fail(peer, f"{value!r} is not a path without '..' parts")
        return None
    if not draft.local:
        draft.drop(peer, f"{values.NOT_SUPPORTED} by the web import, which reads the one file: `lorastudio config"
                   " import` reads the files it names")  # fmt: skip
        return None
    return side_file(draft.file, value)


UP = 3  # folders above the peer file's searched for a relative side file


def _own_folder(folder: Path) -> bool:
    """Whether `folder` is this user's own (owned by this user, writable by no one else): a folder
    a working copy of SimpleTuner / OneTrainer is. Not /tmp, /home or another user's folder, where
    a file of the side file's name may be anyone's. Root (a container's user, its working copy
    often a bind mount of the host user's) takes any owner's folder, never one anyone can write.
    True where the system has no user ids."""
    getuid = getattr(os, "getuid", None)
    if getuid is None:
        return True
    try:
        info = folder.stat()
    except OSError:
        return False
    return getuid() in (0, info.st_uid) and not info.st_mode & stat.S_IWOTH


def side_path_above(draft: Draft, peer: str, value: Any) -> Path | None:
    """`side_path`'s file, and where a relative one is not beside the peer file, the first of the
    folders above it (up to UP) that holds it: SimpleTuner and OneTrainer read the files their
    configs name against their working folder, the one holding the config's folder
    (SimpleTuner's "config/multidatabackend.json" of config/config.json, OneTrainer's
    "training_concepts/concepts.json" of training_presets/x.json). A folder above is searched
    only while it and every folder from it down to the file are the user's own (`_own_folder`):
    a shared /tmp, /home or another user's folder could hold a file of that name the user never
    wrote (its datasets read as the run's)."""
    path = side_path(draft, peer, value)
    if path is None or path.exists() or Path(str(value)).expanduser().is_absolute():
        return path
    for above in list(draft.file.parent.resolve().parents)[:UP]:
        if not _own_folder(above):
            break
        found = above / str(value)
        if found.is_file() and all(
            _own_folder(p) for p in found.parents if p != above and above in p.parents
        ):
            return found
    return path


def drop_all(draft: Draft, root: str, data: dict[str, Any], reasons: dict[str, str]) -> set[str]:
    """Report each key of `reasons` present in `data` as not carried for its reason; returns them."""
    done = set()
    for key, why in reasons.items():
        if key in data:
            draft.drop(f"{root}{key}", why)
            done.add(key)
    return done


def optimizer_args(draft: Draft, peer: str, optimizer: str | None, args: dict[str, Any]) -> None:
    """An optimizer's own arguments (kohya's optimizer_args "k=v" strings parsed to a dict,
    ai-toolkit's optimizer_params): each carried to the setting of `optimizer` that holds it, or
    not carried. `peer` is their parent key."""
    prodigy = {"d_coef": "prodigy_d_coef", "use_bias_correction": "prodigy_use_bias_correction",
               "safeguard_warmup": "prodigy_safeguard_warmup"}  # fmt: skip
    adafactor = {"relative_step": "adafactor_relative_step", "scale_parameter": "adafactor_scale_parameter",
                 "warmup_init": "adafactor_warmup_init"}  # fmt: skip
    for key, raw in args.items():
        where = f"{peer}.{key}"
        if key == "weight_decay":
            carry(draft, where, raw, "weight_decay", values.number)
        elif key == "betas":
            carry(draft, where, raw, "optimizer_betas", _betas)
        elif key == "eps":
            carry(draft, where, raw, "optimizer_eps", values.number)
        elif key in prodigy and optimizer == "prodigy":
            carry(draft, where, raw, prodigy[key], values.number if key == "d_coef" else values.flag)
        elif key in adafactor and optimizer == "adafactor":
            carry(draft, where, raw, adafactor[key], values.flag)
        elif key in ("decouple", "foreach", "fused"):
            draft.drop(
                where, f"{NOT_NEEDED}: lorastudio's optimizers are decoupled and fused where they can be"
            )
        else:
            draft.drop(
                where, f"{values.NOT_SUPPORTED}: {optimizer or 'this optimizer'} takes no {key!r} here"
            )


def _betas(value: Any) -> list[float]:
    """Two betas from a list or "0.9,0.99" text. Raises Skip."""
    parts = value.replace("(", "").replace(")", "").split(",") if isinstance(value, str) else value
    if not isinstance(parts, list | tuple) or len(parts) != 2:
        raise Skip(f"{value!r} is not two betas")
    return [values.number(p) for p in parts]


def parse_args(draft: Draft, peer: str, raw: Any) -> dict[str, Any]:
    """kohya's list of "key=value" strings (optimizer_args, network_args) as a dict of text
    values; an item that is not "key=value" is reported as not carried."""
    out: dict[str, Any] = {}
    items = raw if isinstance(raw, list) else str(raw).split()
    for i, item in enumerate(items):
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip():
            draft.drop(f"{peer}[{i}]", f"{item!r} is not key=value")
            continue
        out[key.strip()] = value.strip().strip("'\"")
    return out


def simple(
    draft: Draft, data: dict[str, Any], table: dict[str, tuple[str, Callable[[Any], Any]]], root: str = ""
) -> None:
    """Carry each key of `table` present in `data` (peer key -> our key, converter)."""
    for key, (ours, convert) in table.items():
        if key in data:
            carry(draft, f"{root}{key}", data[key], ours, convert)
