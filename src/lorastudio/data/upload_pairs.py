"""Paired uploads (data/uploads.py): control images sent in a form field named after their
control folder (`control`, `control_2` ... `control_10`, data/pairs.py's layout) are stored as
<dataset>/<folder>/<file name>. A control must be an image whose stem names a target image of
the upload or of the dataset; a control whose target was refused is refused with it; a file sent
in a field spelt like a control field but not one (`controls`) is refused. No torch."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from lorastudio.data.discovery import is_image_name
from lorastudio.data.pairs import (
    CONTROL_FOLDER,
    LAST_CONTROL_FOLDER,
    control_subfolders,
    misnamed_control_folder,
)
from lorastudio.data.paths import nfc, stem_key
from lorastudio.errors import DatasetError


def control_slot(field: str) -> str | None:
    """The control folder a form field names ("control", "control_2" ...), None for any other."""
    return field if CONTROL_FOLDER.match(field) else None


def misnamed_control_field(field: str) -> str | None:
    """Why a file sent in form field `field` is refused when the field looks like a control field
    spelt otherwise (`controls`, `Control`, `control_1`: pairs.misnamed_control_folder), None for
    a control field or any other name. Stored as a dataset image, a control of its target's name
    would replace the target."""
    if misnamed_control_folder(field) is None:
        return None
    return (
        f"sent in the field {field!r}, not a control field: control images go in fields named "
        f"control, control_2 ... {LAST_CONTROL_FOLDER} (spelt exactly so)"
    )


def control_key(slot: str, name: str) -> str:
    """The batch key (and relative path in the dataset) of control `name` of folder `slot`.
    Raises DatasetError when `name` is not an image (a control is always one)."""
    if not is_image_name(name):
        raise DatasetError(f"cannot upload {name}", [f"{name}: a control image must be PNG, JPEG or WebP"])
    return f"{slot}/{name}"


def dataset_image_stems(dataset_dir: Path) -> set[str]:
    """Stems (pairs.stem_key: NFC) of the target images already in the dataset folder (not its
    sub-folders)."""
    if not dataset_dir.is_dir():
        return set()
    return {stem_key(p.name) for p in dataset_dir.iterdir() if is_image_name(p.name) and p.is_file()}


def unmatched_controls(
    controls: Iterable[str], target_stems: set[str], refused_targets: Mapping[str, str]
) -> dict[str, str]:
    """Control keys ("control/a.png") that cannot be stored -> why: their target was refused,
    or no target image of that stem is in the upload or the dataset."""
    problems: dict[str, str] = {}
    for key in controls:
        stem = Path(key).stem
        if stem_key(key) in target_stems:
            continue
        if stem in refused_targets:
            problems[key] = f"its target {refused_targets[stem]} was refused"
        else:
            problems[key] = (
                f"no target image named {stem}.* in the upload or the dataset (controls pair by name)"
            )
    return problems


def make_control_folder(dir_fd: int, slot: str, dataset: str) -> None:
    """Create control folder `slot` in the dataset folder open as `dir_fd` when missing.
    Raises DatasetError when it exists as something else (a link, a file)."""
    try:
        os.mkdir(slot, dir_fd=dir_fd)
        return
    except FileExistsError:
        pass
    import stat

    info = os.stat(slot, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISDIR(info.st_mode):
        raise DatasetError(
            f"cannot store controls in {dataset}/{slot}", [f"{slot}: exists and is not a folder (a link?)"]
        )


def controls_of(dataset_dir: Path, stem: str) -> list[Path]:
    """The control images of target stem `stem` in the dataset's control folders (regular
    files, not links), in slot order: what goes with the target when it is deleted."""
    return [
        path
        for folder in control_subfolders(dataset_dir)
        if not folder.is_symlink()
        for path in sorted(folder.iterdir())
        if stem_key(path.name) == nfc(stem)  # `stem` is a stem already: "v1.2" is not "v1"
        and is_image_name(path.name)
        and path.is_file()
        and not path.is_symlink()
    ]
