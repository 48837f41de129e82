"""Paired datasets: each target image with its control (reference) images.

A paired sample is a target image, 1..K control images and a caption (the edit instruction).
Three layouts are read, the ones users bring from other trainers:

  * control sub-folders of the dataset: `control/` (slot 1), `control_2/`, `control_3/` ...
    `control_10/` (slot N, up to MAX_CONTROL_SLOTS: the most any family takes), each holding images with the same stems as the targets (`a.png` <- `control/a.jpg`);
  * `metadata.jsonl` rows naming a target's controls: `"control_file_name": "ref/a.png"` (one)
    or `"control_files": ["ref/a.png", "ref/a2.png"]` (in slot order), relative to the dataset
    folder and inside it;
  * parallel folders given in the config as `control_dirs` (ai-toolkit's layout): folder N is
    slot N (after the dataset's own control sub-folders), matched by stem.

A target listed in metadata.jsonl with controls takes exactly those; other targets take their
stem's image from every control folder (stems compared in Unicode NFC: data.paths.stem_key). The pairing is checked against what the family takes
(FamilySpec.control_images = (min, max); (0, 0) for text-to-image families): every problem is
reported at once, naming the files: a control named in metadata that is missing, outside the
dataset or unreadable; targets without controls (when the family needs them); control images
that match no target (orphans); two control images of one stem in one folder (a.png and a.jpg:
none is picked); more or fewer controls than the family takes; controls given to a
text-to-image family; a target with a control in a later folder but none in an earlier one (its
controls would move up a slot); a control_dirs folder that is the dataset folder or a control
folder read already; an image of a format not read (a.bmp, a.tif, a.gif) in a control folder
beside the target a.png, which would train without it (data/pair_checks.py; a control folder's
other entries not read, a sub-folder or a text file, are listed with the dataset's files not used). Targets without controls beside paired ones (a mixed dataset) are allowed
where the family trains both (min 0: FLUX.2, FLUX.1 Kontext, Qwen-Image-Edit-Plus, whose
pipelines edit with references or generate without), and refused naming them where it needs
controls (min >= 1: the single-image Qwen-Image-Edit, whose prompt template always holds one). Targets
may differ in their number of controls: each batch takes samples of one count
(data/sampler.py groups them by bucket and count).

The size each control trains at is the run's `control_resolution` (data/control_sizing.py, set
on the items by data/run_scan.with_control_sizes): "pipeline" (the default) the size the
family's edit pipeline encodes a reference at, from the control's own aspect ratio, whatever its
target's bucket (Qwen-Image-Edit ~1 MP, FLUX.1 Kontext its nearest preferred resolution, FLUX.2
capped at 1 MP); an int N that rule at an N x N area; "target" (and any family without a
pipeline rule) resized to cover its target's bucket and cropped (and flipped) like the target
(`load_control_crop`, data/crop.py), so the control latent has the target latent's size: a control
of its target's shape up to pixel rounding (a half-size copy: data.crop.same_shape) is resized to
the target's own resized size and cut at its crop, aligned; another shape is centre-cropped. No
torch here.

Controls are opened like every dataset file (data/safe_open.py): relative to their folder, whose
identity the pairing records (`PairReport.folder_ids`), without following a link; a control whose
real path leaves the dataset folder and the control_dirs is refused before it is opened. Each
control is checked as a target is (data/decode_checks.check_images): decoded fully once and kept in the
dataset folder's decoded record under its relative path (`control/a.png`), a bad one named with
its folder. The count checks are data/control_counts.py's.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lorastudio import json_read
from lorastudio.data.captions import METADATA_CONTROL_KEYS
from lorastudio.data.control_counts import count_problems
from lorastudio.data.crop import cover_crop, resized_size, same_shape
from lorastudio.data.decode_checks import check_images
from lorastudio.data.decode_slots import DEFAULT_DECODE_PIXELS
from lorastudio.data.discovery import is_image_name
from lorastudio.data.images import load_rgb
from lorastudio.data.pair_checks import (
    escaping_links,
    folder_files,
    folder_label,
    repeated_folders,
    slot_gap,
)
from lorastudio.data.paths import stem_key
from lorastudio.data.row_names import image_keyed, spelt_file
from lorastudio.data.safe_open import FolderId, folder_identity, open_in_folder
from lorastudio.errors import DatasetError

if TYPE_CHECKING:
    from lorastudio.data.decoded import DecodedRecord
    from lorastudio.data.items import ImageItem

MAX_CONTROL_SLOTS = 10  # the most control images any family takes (FLUX.2 dev: 10 references)
LAST_CONTROL_FOLDER = f"control_{MAX_CONTROL_SLOTS}"
# control, control_2 ... control_10 (control_1 is no name of one: slot 1 is control/)
CONTROL_FOLDER = re.compile(rf"^control(?:_({'|'.join(str(n) for n in range(2, MAX_CONTROL_SLOTS + 1))}))?$")


@dataclass(frozen=True)
class PairReport:
    """The result of pairing a dataset's targets with their controls.

    controls: target file name -> control paths in slot order (targets without controls absent);
    folders: names of the dataset's sub-folders read as control folders (not "dropped");
    sources: where controls were read from, for the preflight report;
    problems: every problem found, each naming a file ("" when none).
    """

    controls: dict[str, tuple[Path, ...]] = field(default_factory=dict)
    folder_ids: dict[str, tuple[FolderId, ...]] = field(default_factory=dict)  # per control, its folder
    dims: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)  # per control (width, height)
    decoded: dict[str, tuple[bool, ...]] = field(default_factory=dict)  # per control: every pixel decoded
    folders: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    unpaired: list[str] = field(default_factory=list)  # targets without any control
    orphans: list[str] = field(default_factory=list)  # control files matching no target
    unread: list[tuple[str, str]] = field(default_factory=list)  # (folder/name, why): not read
    case_twins: dict[str, str] = field(
        default_factory=dict
    )  # orphan -> the target its name differs from in case
    problems: list[str] = field(default_factory=list)


def misnamed_control_folder(name: str) -> str | None:
    """Why the dataset sub-folder `name` is not read as control images when it looks like a control
    folder (`Control`, `controls`, `control_1`, `control_11`, `ctrl` ...: CONTROL_FOLDER's names
    spelt otherwise), None for a control folder or any other name. A guess is never paired."""
    low = name.casefold()
    if CONTROL_FOLDER.match(name) or not low.startswith(("control", "ctrl")):
        return None
    return (
        f"not read as a control folder (control images go in control/, control_2/ ... {LAST_CONTROL_FOLDER}/, "
        "spelt exactly so; rename it)"
    )


def control_subfolders(root: Path) -> list[Path]:
    """The dataset's control sub-folders in slot order (control, control_2, ... control_10)."""
    found: list[tuple[int, Path]] = []
    try:
        with os.scandir(root) as it:  # names first: a Path per entry is costly in a large dataset
            entries = [(entry.name, entry.is_dir()) for entry in it if CONTROL_FOLDER.match(entry.name)]
    except OSError:
        return []
    for name, is_dir in entries:
        match = CONTROL_FOLDER.match(name)
        if match and is_dir:
            found.append((int(match.group(1) or 1), root / name))
    return [path for _, path in sorted(found)]


def _folder_images(folder: Path) -> dict[str, tuple[Path, ...]]:
    """stem_key -> the image paths of that stem in a control folder, sorted (not recursive;
    hidden files ignored). Several files of one stem (a.png and a.jpg) are a clash:
    stem_clash_problem."""
    by_stem: dict[str, list[Path]] = {}
    try:
        for path in sorted(folder.iterdir()):
            if path.is_file() and is_image_name(path.name):
                by_stem.setdefault(stem_key(path.name), []).append(path)
    except OSError:
        return {}
    return {stem: tuple(paths) for stem, paths in by_stem.items()}


def read_metadata_controls(
    path: Path, folder_id: FolderId | None = None
) -> tuple[dict[str, list[str]], list[str]]:
    """Control names per target from metadata.jsonl: (file_name -> [relative control paths],
    problems). Lines without control keys are skipped; malformed lines, a link or a file over
    the size cap are reported by the caption reader (data/captions.py), so only bad control
    values are reported here. The file is opened as data.safe_open does."""
    from lorastudio.data.captions import MAX_METADATA_BYTES, _lines

    controls: dict[str, list[str]] = {}
    problems: list[str] = []
    lines: list[tuple[int, bytes]] = []
    try:  # line by line, each at most MAX_METADATA_LINE_BYTES (a longer one is never held)
        with open_in_folder(path, folder_id) as fh:
            if os.fstat(fh.fileno()).st_size > MAX_METADATA_BYTES:
                return {}, []
            lines = [(n, line) for n, line in _lines(fh) if line is not None and b"control" in line]
    except (DatasetError, OSError):
        return {}, []  # the caption reader reports it
    for lineno, raw_line in lines:
        try:
            row = json_read.loads(raw_line.decode("utf-8-sig"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if not isinstance(row, dict) or not isinstance(row.get("file_name"), str):
            continue
        if not any(k in row for k in METADATA_CONTROL_KEYS):
            continue
        target = row["file_name"].strip().removeprefix("./")
        where = f"{path.name} line {lineno}"
        names: list[str] = []
        one, many = row.get("control_file_name"), row.get("control_files")
        if isinstance(one, str):
            names.append(one)
        elif one is not None:
            problems.append(f'{where}: "control_file_name" of {target} must be a string')
        if many is not None:
            if isinstance(many, list) and all(isinstance(n, str) for n in many):
                names += many
            else:
                problems.append(f'{where}: "control_files" of {target} must be a list of strings')
        controls[target] = [n.strip().removeprefix("./") for n in names]
    return controls, problems


def resolve_control_dirs(given: Sequence[str], datasets_root: Path, allow_outside_root: bool) -> list[Path]:
    """The config's control_dirs resolved like data_dir (data.paths.resolve_dataset_dir: a name
    under the datasets root, or an absolute path where the caller allows it). Raises
    ConfigError / PathOutsideRoot naming the folder and its place, "control_dirs[i]" (they named
    data_dir, which was not the setting at fault)."""
    from lorastudio.data.paths import resolve_dataset_dir

    return [
        resolve_dataset_dir(d, datasets_root, allow_outside_root, f"control_dirs[{i}]")
        for i, d in enumerate(given)
    ]


def _same_file(a: Path, b: Path) -> bool:
    """Whether `a` and `b` are one file (a link or another spelling included); False when either
    cannot be read (named elsewhere)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _inside(root: Path, name: str) -> Path | None:
    """root / name when `name` is a relative path that stays inside root, else None."""
    rel = Path(name)
    if not name or rel.is_absolute() or ".." in rel.parts:
        return None
    return root / rel


def pair_controls(
    root: Path,
    targets: Sequence[str],
    metadata: Path | None,
    control_dirs: Sequence[Path],
    allowed: tuple[int, int],
    *,
    family: str,
    max_pixels: int,
    decode_pixels: int = DEFAULT_DECODE_PIXELS,
    folder_id: FolderId | None = None,
    record: DecodedRecord | None = None,
) -> PairReport:
    """Pair every target file name of the dataset folder `root` with its control images.

    Takes: `targets`, the target image names found in root; `metadata`, the metadata.jsonl path
    (or None); `control_dirs`, the config's parallel control folders (resolved); `allowed`, the
    family's (min, max) control images per sample and its name (for messages); `max_pixels`,
    the largest accepted control image; `decode_pixels`, the decode budget of one check;
    `folder_id`, the identity of `root` the scan recorded (data.safe_open); `record`, the
    dataset folder's decoded record (data/decoded.py: a control it does not list as it is now
    is decoded fully within its budget and recorded when it passes; None: header check only).
    Returns: a PairReport (see its fields); its `problems` are empty when the pairing is usable.
    """
    sub = control_subfolders(root)
    folders = [*sub, *control_dirs]
    report = PairReport(folders=[f.name for f in sub])
    problems = report.problems
    from_metadata, meta_problems = read_metadata_controls(metadata, folder_id) if metadata else ({}, [])
    problems += meta_problems
    from_metadata = image_keyed(from_metadata, targets)  # a row spelt otherwise: its image's (2200)
    for folder in control_dirs:
        if not folder.is_dir():
            problems.append(f"control_dirs: {folder} is not a folder")
    repeated = repeated_folders(root, folders, problems)
    indexed = [(folder, _folder_images(folder)) for folder in folders if folder not in repeated]
    stems = {stem_key(t): t for t in targets}
    used: set[Path] = set()
    for target in targets:
        if target in from_metadata:
            paths = []
            for name in from_metadata[target]:
                path = _inside(root, name)
                if path is not None and not path.is_file():  # its accents composed otherwise (2200)
                    path = spelt_file(path) or path
                if path is None:
                    problems.append(f"{target}: control {name!r} must be a relative path inside the dataset")
                elif not path.is_file():
                    problems.append(f"{target}: control image {name} not found")
                elif _same_file(path, root / target):
                    problems.append(
                        f"{target}: control {name} is the image itself (the edit learnt would be a copy); "
                        "name its reference image"
                    )
                else:
                    paths.append(path)
            used.update(paths)
        else:
            paths = [images[stem_key(target)][0] for _, images in indexed if stem_key(target) in images]
            problems += slot_gap(target, root, indexed) if allowed[1] > 0 else []  # else: "takes none"
        if paths:
            report.controls[target] = tuple(paths)
        else:
            report.unpaired.append(target)
    problems += folder_files(report, root, indexed, stems, from_metadata, used, allowed[1] > 0)
    report.sources.extend(f"{f.name}/" for f in sub)
    report.sources.extend(str(f) for f in control_dirs)
    if from_metadata:
        report.sources.append(f"{metadata.name if metadata else 'metadata.jsonl'} (control_files)")
    problems += count_problems(report, allowed, family)
    escaping = escaping_links(report, [root, *control_dirs])
    problems += escaping.values()
    # a target with a control outside is not checked further (nothing outside is opened); the
    # others are, so that every problem is named at once
    checked = {t: paths for t, paths in report.controls.items() if not any(p in escaping for p in paths)}
    identities: dict[Path, FolderId] = {}
    if record is not None:
        record.expect(path for paths in checked.values() for path in paths)
    # each control's folder identity first, then every control checked at once (on the decode
    # threads: data/decode_checks.py), then the answers taken in the same order as before
    plan: list[tuple[str, list[tuple[Path, FolderId | None] | list[str]]]] = []
    files: list[tuple[Path, FolderId | None]] = []
    for target, paths in checked.items():
        steps: list[tuple[Path, FolderId | None] | list[str]] = []
        for path in paths:
            try:
                if path.parent not in identities:
                    identities[path.parent] = folder_identity(path.parent)
            except DatasetError as err:
                steps.append([f"control {p}" for p in err.problems])
                continue
            steps.append((path, identities[path.parent]))
            files.append((path, identities[path.parent]))
        plan.append((target, steps))
    answers = iter(check_images(files, max_pixels, decode_pixels, record))
    for target, steps in plan:
        ids: list[FolderId] = []
        dims: list[tuple[int, int]] = []
        decoded: list[bool] = []
        for step in steps:
            if isinstance(step, list):
                problems += step
                continue
            path, _folder_id = step
            ids.append(identities[path.parent])
            info, full = next(answers)
            if isinstance(info, DatasetError):
                where = folder_label(root, path.parent)
                problems += [f"control image {where}{p}" for p in info.problems]
            else:
                dims.append((info.width, info.height))
                decoded.append(full)
        report.folder_ids[target] = tuple(ids)
        report.dims[target] = tuple(dims)
        report.decoded[target] = tuple(decoded)
    return report


def control_folder_ids(item: ImageItem) -> tuple[FolderId | None, ...]:
    """The folder identity to open each of `item.controls` with (None: not recorded)."""
    ids = item.control_folder_ids
    return ids if len(ids) == len(item.controls) else (None,) * len(item.controls)


def load_control_crop(
    path: Path,
    bucket: tuple[int, int],
    crop_top_left: tuple[int, int],
    target_resized: tuple[int, int],
    flip: bool,
    folder_id: FolderId | None = None,
) -> np.ndarray:
    """A control image as its target's crop sees it: [3, bucket_h, bucket_w] float32 in [-1, 1].

    A control of the target's shape (`same_shape`: its aspect ratio is the target's up to the
    rounding of either to whole pixels, e.g. a half-size copy) is resized to the target's resized
    size `target_resized` (width, height) (Lanczos, as targets are), cropped at the target's
    `crop_top_left` (as CroppedImage reports it: mirrored when flipped) and flipped with it, so
    target and control stay aligned; another shape is scaled to cover the bucket and
    centre-cropped (and flipped with the target). Draws nothing from any rng. `folder_id`: the
    control folder's identity recorded by the scan (data.safe_open; None: not checked).
    Raises DatasetError if the file cannot be decoded, is a link, or its folder changed.
    """
    img = load_rgb(path, folder_id)
    bw, bh = bucket
    aligned = same_shape(img.size, (target_resized[0], target_resized[1]))
    rw, rh = (
        (target_resized[0], target_resized[1]) if aligned else resized_size(img.width, img.height, bucket)
    )
    if aligned:
        top, left = crop_top_left
        if flip:  # undo the mirroring of `left` that load_crop reports for a flipped crop
            left = rw - left - bw
    else:
        top, left = (rh - bh) // 2, (rw - bw) // 2
    arr = np.asarray(cover_crop(img, (rw, rh), (top, left), bucket), dtype=np.uint8)  # [bh, bw, 3]
    if flip:
        arr = arr[:, ::-1]  # [bh, bw, 3] mirrored
    pixels = arr.astype(np.float32).transpose(2, 0, 1) / 127.5 - 1.0  # [3, bh, bw] in [-1, 1]
    return np.ascontiguousarray(pixels, dtype=np.float32)
