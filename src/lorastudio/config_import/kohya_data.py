"""kohya's data arguments -> lorastudio datasets (no torch).

dataset_config names a TOML of `[general]`, `[[datasets]]` and `[[datasets.subsets]]` (sd-scripts'
docs/config_README; musubi-tuner's `image_directory` spelling too): each subset with an image
folder becomes a `[[datasets]]` entry, general < dataset < subset as kohya merges them. Without it,
train_data_dir's N_name folders are read in place (kohya_folders = true) and reg_data_dir's are a
regularisation entry. kohya reads its dataset arguments (resolution, buckets, captions) only
without dataset_config; beside one they are reported as not needed. sample_prompts names a .txt
file of prompt lines ("a cat --w 1024 --h 768 --d 42 --l 3.5"), read into sample prompt objects.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from lorastudio.config_import import values
from lorastudio.config_import.common import carry, folder, side_path
from lorastudio.config_import.reading import file_text, read_bytes, read_document
from lorastudio.config_import.report import NOT_NEEDED, NOT_SUPPORTED, Draft
from lorastudio.config_import.samples import MOST_PROMPTS, prompt_line, refused

_ENTRY = (  # kohya subset argument -> entry key, converter
    ("num_repeats", "repeats", values.integer),
    ("class_tokens", "default_caption", values.text),
    ("keep_tokens", "keep_tokens", values.integer),
    ("shuffle_caption", "shuffle_tags", values.flag),
    ("caption_dropout_rate", "caption_dropout", values.number),
    ("caption_tag_dropout_rate", "tag_dropout", values.number),
    ("is_reg", "regularisation", values.flag),
)
_RUN = (  # kohya dataset argument -> the run's setting, converter
    ("enable_bucket", "aspect_buckets", values.flag),
    ("bucket_no_upscale", "no_upscale", values.flag),
    ("flip_aug", "random_flip", values.flag),
    ("random_crop", "random_crop", values.flag),
    ("alpha_mask", "alpha_mask", values.flag),
    ("batch_size", "batch_size", values.integer),
)
_DATA_ARGS = {
    "resolution",
    "max_resolution",
    "caption_extension",
    *(k for k, _, _ in _ENTRY),
    *(k for k, _, _ in _RUN),
}
_DATASET_REASONS = {
    "cache_directory": f"{NOT_NEEDED}: latents are cached by the studio",
    "cache_info": f"{NOT_NEEDED}: latents are cached by the studio",
    "metadata_file": f"{NOT_SUPPORTED}: captions are <image>.txt files, not a fine-tuning metadata file",
    "color_aug": f"{NOT_SUPPORTED}: no colour augmentation",
    "face_crop_aug_range": f"{NOT_SUPPORTED}: no face-crop augmentation",
    "min_bucket_reso": f"{NOT_SUPPORTED}: the buckets come from the resolution",
    "max_bucket_reso": f"{NOT_SUPPORTED}: the buckets come from the resolution",
    "bucket_reso_steps": f"{NOT_SUPPORTED}: the buckets step by the family's resolution multiple",
    "keep_tokens_separator": f"{NOT_SUPPORTED}: keep_tokens counts comma-separated tags",
    "secondary_separator": f"{NOT_SUPPORTED}: tags are comma-separated",
    "caption_prefix": f"{NOT_SUPPORTED}: trigger_word is prepended to captions",
    "caption_suffix": f"{NOT_SUPPORTED}: captions are read as written",
    "token_warmup_min": f"{NOT_SUPPORTED}: no caption warmup",
    "token_warmup_step": f"{NOT_SUPPORTED}: no caption warmup",
    "caption_dropout_every_n_epochs": f"{NOT_SUPPORTED}: caption_dropout drops per sample",
    "conditioning_data_dir": f"{NOT_SUPPORTED} by the importer: set control_dirs (paired datasets) by hand",
    "control_directory": f"{NOT_SUPPORTED} by the importer: set control_dirs (paired datasets) by hand",
    "num_workers": f"{NOT_NEEDED}: the data is cached before the loop",
}


def side(value: Any) -> int:
    """kohya's resolution ("1024,768", 1024, [960, 544]) as one side: the square of the same area,
    to a multiple of 64. Raises values.Skip."""
    parts = value.split(",") if isinstance(value, str) else value if isinstance(value, list) else [value]
    sides = [values.integer(p) for p in parts]
    if len(sides) not in (1, 2) or min(sides) < 1:
        raise values.Skip(f"{value!r} is not a resolution")
    if len(sides) == 1 or sides[0] == sides[1]:
        return sides[0]
    return max(64, round(math.sqrt(sides[0] * sides[1]) / 64) * 64)


def _side_how(value: Any) -> str:
    """How `side` changed a non-square resolution, or ""."""
    try:
        parts = value.split(",") if isinstance(value, str) else value if isinstance(value, list) else [value]
        if len(parts) == 2 and values.integer(parts[0]) != values.integer(parts[1]):
            return "the side of a square of the same area: buckets of every aspect ratio around that area"
    except values.Skip:
        pass
    return ""


def data(draft: Draft, args: dict[str, tuple[str, Any]]) -> None:
    """Map the data arguments of `args` (taken out of it) into `draft`."""
    config = args.pop("dataset_config", None)
    train = args.pop("train_data_dir", None)
    reg = args.pop("reg_data_dir", None)
    prompts = args.pop("sample_prompts", None)
    present = {k: args.pop(k) for k in sorted(_DATA_ARGS) if k in args}
    if config is not None:
        _dataset_config(draft, config)
        for name in ("train_data_dir", "reg_data_dir"):
            if (item := {"train_data_dir": train, "reg_data_dir": reg}[name]) is not None:
                draft.drop(item[0], f"{NOT_NEEDED}: kohya reads dataset_config instead")
        for peer, _ in present.values():
            draft.drop(peer, f"{NOT_NEEDED}: kohya reads the dataset_config's value instead")
    elif train is not None:
        _folders(draft, train, reg, present)
    else:
        for item in (reg, *present.values()):
            if item is not None:
                draft.drop(item[0], f"{NOT_NEEDED}: the file names no image folder")
    if prompts is not None:
        _prompt_file(draft, prompts)


def _folders(
    draft: Draft, train: tuple[str, Any], reg: tuple[str, Any] | None, present: dict[str, Any]
) -> None:
    """train_data_dir's N_name folders in place (kohya_folders), reg_data_dir a regularisation entry, the dataset arguments the run's settings."""
    found = folder(draft, train[0], train[1])
    if found is None:
        # the folders not read (the API reads no disk, or a folder not there): the run's own
        # settings (resolution, buckets, caption settings) still carry, for the dataset the user
        # picks; before, every one was dropped and the web form kept its 1024 px (RELIABILITY 1784)
        if reg is not None:
            draft.drop(reg[0], f"{NOT_NEEDED}: no image folder carried")
    else:
        draft.set(train[0], "datasets.0.path", found[0], found[1])
        draft.set(train[0], "kohya_folders", True, "its N_name sub-folders read in place, each an entry")
        if reg is not None and (got := folder(draft, reg[0], reg[1])) is not None:
            draft.set(reg[0], "datasets.1.path", got[0], got[1])
            draft.set(reg[0], "datasets.1.regularisation", True)
    for name, (peer, value) in present.items():
        ours = next((o for k, o, _ in _ENTRY if k == name), None)
        if found is None and name in ("num_repeats", "is_reg", "class_tokens"):  # the folders' own
            draft.drop(peer, f"{NOT_NEEDED}: no image folder carried")
        elif name in ("resolution", "max_resolution"):  # max_resolution: the kohya_ss GUI's name
            carry(draft, peer, value, "resolution", side, _side_how(value))
        elif name == "caption_extension":
            ext = str(value).lstrip(".").lower()
            draft.drop(peer, f"{NOT_NEEDED}: kohya folders' .txt and .caption files are read" if ext in ("txt", "caption")
                       else f"{NOT_SUPPORTED}: captions are .txt or .caption files")  # fmt: skip
        elif name in ("num_repeats", "is_reg"):
            draft.drop(peer, f"{NOT_NEEDED}: the N_name folders give the repeats")
        elif name == "class_tokens":
            draft.drop(
                peer, f"{NOT_NEEDED}: the N_name folders' words are the captions of images without one"
            )
        elif ours is not None:
            conv = next(c for k, _, c in _ENTRY if k == name)
            carry(draft, peer, value, ours, conv)  # the run's caption settings: every folder's
        else:
            ours, conv = next((o, c) for k, o, c in _RUN if k == name)
            carry(draft, peer, value, ours, conv)


def _dataset_config(draft: Draft, config: tuple[str, Any]) -> None:
    """The dataset_config TOML's subsets as [[datasets]] entries (general < dataset < subset)."""
    peer, value = config
    path = side_path(draft, peer, value)
    if path is None:
        return
    doc = read_document(path, where=f"{draft.file.name}: {peer}")
    root = path.name  # its keys reported as "<file name>.datasets[0]...": not inside `peer`
    draft.lines.append(_read_line(peer, path))
    if not isinstance(doc, dict):
        draft.fail(peer, f"{path.name} is not a table of [general] and [[datasets]]")
        return
    general = doc.get("general", {}) if isinstance(doc.get("general"), dict) else {}
    n = 0
    datasets = doc.get("datasets") if isinstance(doc.get("datasets"), list) else []
    for i, dataset in enumerate(datasets):
        if not isinstance(dataset, dict):
            continue
        subsets = (
            dataset.get("subsets") if isinstance(dataset.get("subsets"), list) else [dataset]
        )  # musubi: none
        for j, subset in enumerate(subsets):
            if not isinstance(subset, dict):
                continue
            where = f"{root}.datasets[{i}]" + (f".subsets[{j}]" if subset is not dataset else "")
            merged = {f"{root}.general.{k}": (k, v) for k, v in general.items()}
            merged |= {f"{root}.datasets[{i}].{k}": (k, v) for k, v in dataset.items() if k != "subsets"}
            merged |= {f"{where}.{k}": (k, v) for k, v in subset.items()} if subset is not dataset else {}
            by_name = {k: (p, v) for p, (k, v) in merged.items()}  # the nearest wins
            if _entry(draft, by_name, n, single=len(datasets) == 1):
                n += 1
            elif subset is not dataset or not dataset.get("subsets"):
                draft.drop(where, f"{NOT_SUPPORTED}: no image folder carried from it")
    draft.unread(doc, root)


def _read_line(peer: str, path: Path) -> Any:
    """The report line of a dataset_config read into entries."""
    from lorastudio.config_import.report import Line

    return Line(peer, "changed", "datasets", str(path), "its image folders read as [[datasets]] entries")


def _entry(draft: Draft, merged: dict[str, tuple[str, Any]], n: int, single: bool) -> bool:
    """One subset's merged settings as entry `n` (`single`: the only dataset, whose resolution is the run's); whether it had a folder to carry."""
    image = merged.get("image_dir") or merged.get("image_directory")
    if image is None:
        return False
    found = folder(draft, image[0], image[1])
    if found is None:
        return False
    draft.set(image[0], f"datasets.{n}.path", found[0], found[1])
    for name, (peer, value) in merged.items():
        if name in ("image_dir", "image_directory"):
            continue
        ours = next(((o, c) for k, o, c in _ENTRY if k == name), None)
        run = next(((o, c) for k, o, c in _RUN if k == name), None)
        if ours is not None:
            if name == "num_repeats" and value == 1:
                draft.drop(peer, f"{NOT_NEEDED}: 1 is the default")
            else:
                carry(draft, peer, value, f"datasets.{n}.{ours[0]}", ours[1])
        elif name == "resolution":
            carry(
                draft,
                peer,
                value,
                "resolution" if single else f"datasets.{n}.resolution",
                side,
                _side_how(value),
            )
        elif name == "caption_extension":
            ext = str(value).lstrip(".").lower()
            draft.drop(peer, f"{NOT_NEEDED}: captions are <image>.txt" if ext == "txt" else
                       f"{NOT_SUPPORTED}: captions are read from <image>.txt: rename the .{ext} files")  # fmt: skip
        elif run is not None:
            if run[0] in draft.settings and draft.settings[run[0]] == value:
                draft.fold(peer, run[0], value)
            elif run[0] in draft.settings:
                draft.drop(
                    peer, f"{NOT_SUPPORTED}: {run[0]} is one setting of the run, set by the first dataset"
                )
            else:
                carry(draft, peer, value, run[0], run[1], "" if single else "one setting of the run here")
        elif name in _DATASET_REASONS:
            draft.drop(peer, _DATASET_REASONS[name])
    return True


def _prompt_file(draft: Draft, prompts: tuple[str, Any]) -> None:
    """sample_prompts: a .txt file's lines (or the kohya_ss GUI's text itself) as sample prompt objects, at most MOST_PROMPTS."""
    peer, value = prompts
    if not isinstance(value, str):
        draft.drop(peer, f"{value!r} is neither prompts nor a prompt file")
        return
    if "\n" in value or " --" in value or not value.lower().endswith((".txt", ".toml", ".json")):
        lines, name = [ln.strip() for ln in value.splitlines()], "the prompt text"  # the kohya_ss GUI's field
    else:
        path = side_path(draft, peer, value)
        if path is None:
            return
        if path.suffix.lower() != ".txt":
            draft.drop(peer, f"{NOT_SUPPORTED} by the importer: a .txt prompt file is read ({path.name})")
            return
        raw = read_bytes(path, f"{draft.file.name}: {peer}")
        text = file_text(raw, path, f"{draft.file.name}: {peer}")  # not UTF-8: refused naming the byte
        lines, name = [ln.strip() for ln in text.splitlines()], path.name
    entries = []
    for number, line in enumerate(lines, 1):
        if not line or line.startswith("#"):
            continue
        where = f"{peer}[{name} line {number}]"
        if len(entries) >= MOST_PROMPTS:
            draft.drop(where, f"{NOT_SUPPORTED}: at most {MOST_PROMPTS} sample prompts")
            continue
        entry, dropped = prompt_line(line)
        why = refused({"prompt": entry["prompt"]})
        if why:
            draft.drop(where, f"refused here (its prompt: {why})")
            continue
        entries.append(entry if len(entry) > 1 else entry["prompt"])
        for why in dropped:
            draft.drop(f"{where} {why.split(':', 1)[0]}", why.split(": ", 1)[1])
    if entries:
        draft.set(peer, "sample_prompts", entries, f"the prompt lines of {name}")
    else:
        draft.drop(peer, f"{NOT_NEEDED}: {name} holds no prompt")
