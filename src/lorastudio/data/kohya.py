"""kohya-ss style dataset folders (no torch, no HTTP): `DIR/<N>_<name>/` sub-folders, where N is
how many times each image repeats per epoch and <name> the instance/class words (kohya's
sd-scripts "DreamBooth" layout; e.g. `img/10_sks ball/`).

`parse_kohya_folder` reads one folder name; `plan_kohya_import` flattens such a DIR into the
files of one studio dataset: the images under their own names and one metadata.jsonl row each,
{"file_name", "text", "repeats", "kohya_folder"}: the caption is the image's `.txt` or `.caption`
sidecar (data/kohya_captions.py, the rule a run reading the folders in place follows too; both,
disagreeing: the image is skipped, named), or the folder's words when it has none. `kohya_entries` reads such a DIR as a run's dataset
entries instead (TrainConfig.kohya_folders): one entry per folder, repeats N, its captions read
by the same rule (MixEntry.kohya). Hand-written: the
layout is a naming convention, no library parses it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from lorastudio.data.discovery import is_image_name
from lorastudio.data.kohya_captions import is_kohya_caption_name, kohya_caption, other_caption_reason
from lorastudio.data.mix import MixEntry
from lorastudio.errors import DatasetError
from lorastudio.folder_entries import never_read

# a kohya --dataset_config beside the folders: its settings are not carried over (said, not silent)
_CONFIG_NOT_READ = (
    "a kohya dataset config is not read: the repeats and words come from the N_words folder names and"
    " the printed datasets entries; carry its other settings (resolution, keep_tokens, shuffle_caption ...)"
    " over to the run's config yourself"
)
_FOLDER = re.compile(r"^([0-9]+)_(.+)$")  # ASCII digits only (\d takes any script's)


@dataclass(frozen=True)
class KohyaFolder:
    """One `N_name` folder: `repeats` (N >= 1) and `words`, the instance/class words of the
    name (the caption of an image without one)."""

    repeats: int
    words: str


def parse_kohya_folder(name: str) -> KohyaFolder:
    """Read a kohya folder name `N_words` ("10_sks ball" -> repeats 10, words "sks ball").

    Raises: DatasetError naming the folder when the name is not `<number>_<words>`, the number
    is 0 or above a run's MAX_REPEATS (config_datasets: a larger one would make an epoch of
    billions of samples), the words are blank, or the name holds control, invisible or
    text-direction characters (they would reach captions, trigger words and dataset names).
    """
    from lorastudio.config_datasets import MAX_REPEATS
    from lorastudio.data.paths import hidden_in_name

    hidden = hidden_in_name(name)  # a joiner that joins is part of the words (1103)
    if hidden:
        raise DatasetError(
            f"{ascii(name)}: not a kohya folder",
            [f"{ascii(name)}: the name holds control or invisible characters or bytes ({hidden}); rename it"],
        )
    match = _FOLDER.match(name)
    if match is None:
        raise DatasetError(
            f"{name}: not a kohya folder", [f"{name}: expected <repeats>_<words>, e.g. 10_sks ball"]
        )
    repeats, words = int(match.group(1)), " ".join(match.group(2).replace("_", " ").split())
    problems = []
    if repeats < 1:
        problems.append(f"{name}: repeats must be at least 1")
    if repeats > MAX_REPEATS:
        problems.append(f"{name}: repeats must be at most {MAX_REPEATS} (a run's limit)")
    if not words:
        problems.append(f"{name}: no words after the repeats")
    if problems:
        raise DatasetError(f"{name}: not a kohya folder", problems)
    return KohyaFolder(repeats, words)


def is_kohya_folder(name: str) -> bool:
    """Whether `name` reads as a kohya `N_words` folder (parse_kohya_folder would accept it)."""
    try:
        parse_kohya_folder(name)
    except DatasetError:
        return False
    return True


@dataclass
class KohyaPlan:
    """What a kohya DIR flattens to: `images` (source path, dataset file name), the
    metadata.jsonl `rows`, and `skipped` (path relative to DIR, reason)."""

    images: list[tuple[Path, str]] = field(default_factory=list)
    rows: list[dict[str, object]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def metadata_jsonl(self) -> bytes:
        """The rows as metadata.jsonl bytes (UTF-8, one object per line)."""
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in self.rows).encode("utf-8")


def plan_kohya_import(source: Path, flat: bool = True) -> KohyaPlan:
    """Flatten the kohya folders directly under `source` (links are never followed; hidden
    entries are ignored). A sub-folder whose name is not `N_words`, files beside the folders,
    non-image files and (with `flat`: one dataset for all folders) an image name already taken by
    another folder are skipped (listed).
    Raises DatasetError when no folder is a kohya folder."""
    plan = KohyaPlan()
    taken: dict[str, str] = {}
    folders = 0
    for sub in sorted(p for p in source.iterdir() if not p.name.startswith(".")):
        if sub.is_file() and not sub.is_symlink() and sub.suffix.lower() in (".toml", ".json"):
            plan.skipped.append((sub.name, _CONFIG_NOT_READ))
            continue
        if sub.is_symlink() or not sub.is_dir():
            plan.skipped.append((sub.name, "not a kohya N_name folder (a file or a link)"))
            continue
        try:
            kohya = parse_kohya_folder(sub.name)
        except DatasetError as err:
            plan.skipped.append((sub.name, err.problems[0].split(": ", 1)[-1]))
            continue
        folders += 1
        before = len(plan.images)
        entries = sorted(p for p in sub.iterdir() if not p.name.startswith("."))
        stems = {p.stem for p in entries if is_image_name(p.name)}
        captions: dict[str, list[Path]] = {}  # image stem -> its .txt / .caption files (any case)
        unread: dict[str, str] = {}  # image stem -> a caption file not read (another extension, a link), why
        for path in entries:
            where = f"{sub.name}/{path.name}"
            if (never := never_read(path)) is not None:
                plan.skipped.append((where, never))
                if is_kohya_caption_name(path.name) and path.stem in stems:  # its caption, unread
                    unread.setdefault(path.stem, f"{path.name}: {never}")
            elif (why := other_caption_reason(path.name, stems)) is not None:
                unread.setdefault(path.stem, f"{path.name}: {why}")
            elif is_kohya_caption_name(path.name):
                if path.stem in stems:
                    captions.setdefault(path.stem, []).append(path)
                else:
                    plan.skipped.append((where, "caption without an image"))
        for path in entries:
            where = f"{sub.name}/{path.name}"
            if never_read(path) is not None or is_kohya_caption_name(path.name):
                continue  # listed above
            if (why := other_caption_reason(path.name, stems)) is not None:
                plan.skipped.append((where, why))
                continue
            if not is_image_name(path.name):
                plan.skipped.append((where, "not an image or a caption (.txt, .caption)"))
            elif flat and path.name in taken:
                plan.skipped.append((where, f"{path.name} is already taken by {taken[path.name]}"))
            else:
                try:
                    row = _row(path, sub.name, kohya, captions.get(path.stem, []), unread.get(path.stem))
                except DatasetError as err:  # its caption cannot be read: the pair is skipped
                    plan.skipped.append((where, err.problems[0]))
                    continue
                taken[path.name] = sub.name
                plan.images.append((path, path.name))
                plan.rows.append(row)
        if len(plan.images) == before:  # else it vanished from the import without a word
            plan.skipped.append((sub.name, "no images to import in this folder"))
    if not folders:
        raise DatasetError(
            f"no kohya folders in {source}",
            [f"{source}: no <repeats>_<words> sub-folders (e.g. 10_sks ball)"]
            + [f"{name}: {why}" for name, why in plan.skipped],
        )
    return plan


def _row(
    image: Path, folder: str, kohya: KohyaFolder, captions: list[Path], unread: str | None = None
) -> dict[str, object]:
    """The metadata row of `image`: its caption is that of its `captions` (the .txt / .caption
    files of its stem) by kohya_captions.kohya_caption, the rule a run reading the folder in place
    follows too, else the folder's words, unless `unread` names a caption file of another
    extension (kohya_captions.other_caption_reason) or one never read (a link, a named pipe:
    `folder_entries.never_read`): then the image is not imported under the folder's words.
    Raises DatasetError as kohya_caption does, or naming `unread`."""
    text = kohya_caption(captions).text
    if text is None and unread is not None:
        raise DatasetError("its caption is not read", [f"{unread}; {image.name} has no caption of its own"])
    text = text or kohya.words
    return {"file_name": image.name, "text": text, "repeats": kohya.repeats, "kohya_folder": folder}


def kohya_entries(parent: MixEntry) -> list[MixEntry]:
    """The dataset entries of a folder of kohya `N_words` sub-folders (TrainConfig.kohya_folders):
    one per sub-folder (sorted by name), labelled "parent/N_words", with repeats N, the first
    word as the trigger word and the words as the default caption (unless the parent has its own,
    from the entry or the run); the parent's other settings carry over.
    Raises DatasetError naming the folder when it holds no kohya sub-folder, listing the other
    sub-folders (links are never followed)."""
    from lorastudio.data.discovery import require_folder

    require_folder(parent.root)
    found: list[MixEntry] = []
    others: list[str] = []
    for sub in sorted(p for p in parent.root.iterdir() if not p.name.startswith(".")):
        if sub.is_symlink() or not sub.is_dir():
            continue  # the parent's own files are not part of any entry
        try:
            kohya = parse_kohya_folder(sub.name)
        except DatasetError as err:
            others.append(err.problems[0])
            continue
        found.append(
            replace(
                parent,
                label=f"{parent.label}/{sub.name}",
                root=sub,
                repeats=kohya.repeats,
                # a regularisation folder's words are its class, its captions' words, never a trigger
                trigger_word=parent.trigger_word
                or (None if parent.regularisation else kohya.words.split()[0]),
                default_caption=parent.default_caption or kohya.words,
                kohya=True,  # its captions: .txt / .caption, as the import reads them
            )
        )
    if not found or others:
        raise DatasetError(
            f"{parent.root}: not a folder of kohya sub-folders",
            [f"{parent.root}: no <repeats>_<words> sub-folders (e.g. 10_sks ball)"] * (not found)
            + [f"{parent.root}/{why}" for why in others],
        )
    return found


def kohya_entries_toml(datasets: list[tuple[str, str]], regularisation: bool = False) -> str:
    """The `[[datasets]]` TOML entries of imported kohya folders: (stored dataset name, kohya
    folder name) -> path, repeats N and the folder's first word as trigger_word; with
    `regularisation` (kohya's reg folders: class images), `regularisation = true` instead of a
    trigger word (their captions, else the class words, are used as they are)."""
    lines: list[str] = []
    for name, folder in datasets:
        kohya = parse_kohya_folder(folder)
        lines += [
            "[[datasets]]",
            f"path = {json.dumps(name, ensure_ascii=False)}",
            f"repeats = {kohya.repeats}",
        ]
        if regularisation:
            lines.append("regularisation = true")
        else:
            lines.append(f"trigger_word = {json.dumps(kohya.words.split()[0], ensure_ascii=False)}")
        lines.append("")
    return "\n".join(lines)
