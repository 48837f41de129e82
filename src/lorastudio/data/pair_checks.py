"""The pairing's checks of its folders, files and links (data/pairs.py's pair_controls): a control
folder that is the dataset itself or one read already, a target whose controls skip a slot, a
control linking out of the dataset, the control folders' files that pair with no target (orphans,
two of one stem, a format not read, one a metadata.jsonl row overrides). Each returns its problems
naming the files; no image is opened."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lorastudio.data.paths import stem_key
from lorastudio.data.peer_files import OTHER_IMAGE_EXTENSIONS

if TYPE_CHECKING:
    from lorastudio.data.pairs import PairReport


def repeated_folders(root: Path, folders: Sequence[Path], problems: list[str]) -> set[Path]:
    """The control folders of `folders` that are the dataset folder `root` itself (each target
    would be its own control: the edit learnt would be a copy) or a folder read already for an
    earlier slot (`control_dirs = ["data/control"]` beside the dataset's control/: the same image
    twice), compared as the file system's same folder (a link or another spelling included);
    each is appended to `problems` by name and left out of the pairing."""
    seen: list[tuple[tuple[int, int], Path]] = []
    repeated: set[Path] = set()
    try:
        st = root.stat()
        seen.append(((st.st_dev, st.st_ino), root))
    except OSError:
        return repeated  # the scan names a dataset folder it cannot read
    for folder in folders:
        try:
            st = folder.stat()
        except OSError:
            continue  # "not a folder", named above
        same = next((where for key, where in seen if key == (st.st_dev, st.st_ino)), None)
        if same is None:
            seen.append(((st.st_dev, st.st_ino), folder))
            continue
        repeated.add(folder)
        if same == root:
            problems.append(
                f"control_dirs: {folder} is the dataset folder itself: each image would be its own control; "
                "give the folder of the control images"
            )
        else:
            problems.append(
                f"control_dirs: {folder} is the control folder {folder_label(root, same) or same} read "
                "already (an earlier slot): each image would take the same control twice; remove it"
            )
    return repeated


def slot_gap(
    target: str, root: Path, indexed: Sequence[tuple[Path, dict[str, tuple[Path, ...]]]]
) -> list[str]:
    """The problem of a target that has a control in a later control folder but none in an
    earlier one (`control_2/f.png` without `control/f.*`): its controls would move up a slot
    (control_2's image read as Picture 1 / the first reference), which no caption meant, so it is
    refused naming the folders; [] when its controls fill the slots from the first on."""
    have = [stem_key(target) in images for _, images in indexed]
    last = len(have) - have[::-1].index(True) if True in have else 0  # one past its last folder
    if all(have[:last]):
        return []
    missing = [
        folder_label(root, folder) or "./"
        for (folder, _), ok in zip(indexed[:last], have[:last], strict=True)
        if not ok
    ]
    found = [
        f"{folder_label(root, folder)}{images[stem_key(target)][0].name}"
        for folder, images in indexed
        if stem_key(target) in images
    ]
    return [
        f"{target}: controls {', '.join(found)} but none in {', '.join(missing)}: its controls would "
        f"shift to earlier slots (control slots follow the folders' order); add {missing[0]}"
        f"{Path(target).stem}.* or move its controls up a folder"
    ]


def folder_label(root: Path, folder: Path) -> str:
    """The control folder `folder` as an error names it before a file name: "control/" for a
    sub-folder of the dataset `root`, its full path (with "/") for a control_dirs folder."""
    if folder == root:
        return ""
    return f"{folder.relative_to(root).as_posix()}/" if folder.is_relative_to(root) else f"{folder}/"


def escaping_links(report: PairReport, roots: Sequence[Path]) -> dict[Path, str]:
    """Controls whose real path (symlinks followed) lies outside the dataset folder and the
    control_dirs, each with its problem: refused, as a link out of the dataset would read any
    file of the host."""
    allowed = [r.resolve() for r in roots]
    return {
        path: f"control {path.name}: a link to {path.resolve()}, outside the dataset folder"
        for paths in report.controls.values()
        for path in paths
        if not any(path.resolve().is_relative_to(r) for r in allowed)
    }


def unread_control_entries(folder: Path) -> list[tuple[str, str]]:
    """The visible entries of the control folder `folder` that the pairing does not read, each
    (name, why): a sub-folder (control folders are not scanned recursively), an image of another
    format (a BMP, TIFF, GIF ...: data.peer_files names it), any other file. Hidden entries are
    ignored, as in a dataset folder; [] for a folder that cannot be listed."""
    from lorastudio.data.discovery import IMAGE_EXTENSIONS, is_image_name
    from lorastudio.data.peer_files import foreign_file_reason

    out: list[tuple[str, str]] = []
    try:
        with os.scandir(folder) as it:
            entries = sorted((e.name, e.is_dir(), e.is_file()) for e in it if not e.name.startswith("."))
    except OSError:
        return out
    for name, is_dir, is_file in entries:
        if is_dir:
            out.append((name, "sub-folder (control folders are not scanned recursively)"))
        elif not is_file:
            out.append((name, "not a regular file"))
        elif not is_image_name(name):
            why = (
                foreign_file_reason(name, set()) or f"not an image (supported: {', '.join(IMAGE_EXTENSIONS)})"
            )
            out.append((name, why))
    return out


def unread_control_problem(label: str, name: str, why: str, target: str) -> str:
    """The problem of an image of a format not read (a BMP, TIFF, GIF ...: `why`) in control
    folder `label` with the stem of the target image `target`, which then takes no control from
    that folder: a mixed dataset would train it without the control it was given, unsaid (any
    other entry not read is listed with the dataset's files not used: PairReport.unread)."""
    return f"{label}/{name}: {why}; {target} would train without a control from {label}/"


def stem_clash_problem(label: str, paths: Sequence[Path]) -> str:
    """The problem naming the several control images `paths` of one stem in control folder
    `label`: a target takes one image per control folder, and none is picked silently."""
    listed = ", ".join(f"{label}/{p.name}" for p in paths)
    return (
        f"{listed}: {len(paths)} control images for the image {paths[0].stem}.* in one folder "
        "(which one?): keep one"
    )


def folder_files(
    report: PairReport,
    root: Path,
    indexed: Sequence[tuple[Path, dict[str, tuple[Path, ...]]]],
    stems: dict[str, str],
    from_metadata: dict[str, list[str]],
    used: set[Path],
    takes_controls: bool,
) -> list[str]:
    """Every file of the control folders `indexed` (folder, stem_key -> its images) that pairs
    with no target as read: orphans (PairReport.orphans, with a target whose name differs only in
    case: case_twins), a folder image of a target whose metadata.jsonl row names its controls
    and entries not read (PairReport.unread, listed as not used), and the problems: two images of
    one stem in a folder, an image of a format not read with a target's stem (`takes_controls`:
    the family takes controls). `stems`: stem_key -> target name; `used`: the controls the
    metadata rows named. Returns the problems."""
    problems: list[str] = []
    folded = {key.casefold(): t for key, t in stems.items()}  # to name a control whose case differs
    for folder, images in indexed:
        label = folder.name if folder.parent == root else str(folder)
        for name, why in unread_control_entries(folder):
            other_image = os.path.splitext(name)[1].lower() in OTHER_IMAGE_EXTENSIONS
            target = stems.get(stem_key(name)) if other_image and takes_controls else None
            if target is not None and stem_key(name) not in images and target not in from_metadata:
                problems.append(unread_control_problem(label, name, why, target))
            else:
                report.unread.append((f"{label}/{name}", why))
        for stem, paths in sorted(images.items()):
            if stem not in stems:
                twin = folded.get(stem.casefold())
                for path in paths:
                    if path not in used:
                        report.orphans.append(f"{label}/{path.name}")
                        if twin is not None:
                            report.case_twins[f"{label}/{path.name}"] = twin
            elif stems[stem] in from_metadata:  # the row names its controls: this one is not read
                report.unread.extend(
                    (
                        f"{label}/{path.name}",
                        f"{stems[stem]}'s controls are the ones its metadata.jsonl row names",
                    )
                    for path in paths
                    if path not in used
                )
            elif len(paths) > 1:
                problems.append(stem_clash_problem(label, paths))
    return problems
