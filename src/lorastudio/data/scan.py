"""scan_dataset: validate a dataset folder completely before any model loads.

Every problem is collected and reported at once in one DatasetError (`problems` lists each file
or fact that is wrong). The scan only reads; it never writes into the dataset folder. It follows
no symbolic link: the folder's identity is recorded (`safe_open.folder_identity`) and every file
is opened from that folder only, here and when the training worker decodes it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from lorastudio.data.buckets import choose_bucket, make_buckets, resolution_problems
from lorastudio.data.captions import (
    TRIGGER_PLACEHOLDER,
    choose_caption,
    overridden_row,
    read_metadata,
    read_sidecar,
    unread_markup,
)
from lorastudio.data.decode_checks import check_images
from lorastudio.data.decode_progress import DecodeProgress
from lorastudio.data.decode_slots import DEFAULT_DECODE_PIXELS
from lorastudio.data.decoded import DecodedRecord
from lorastudio.data.discovery import IMAGE_EXTENSIONS, METADATA_FILE, discover, unused_images
from lorastudio.data.items import DatasetScan, ImageItem
from lorastudio.data.kohya_captions import kohya_caption
from lorastudio.data.pairs import control_folder_ids, misnamed_control_folder, pair_controls
from lorastudio.data.peer_files import subfolder_hints, unread_caption_problems
from lorastudio.data.row_names import match_rows, spelt_row_note
from lorastudio.data.safe_open import FolderId, folder_identity, open_in_folder
from lorastudio.errors import DatasetError

log = logging.getLogger(__name__)

_HASH_CHUNK = 1 << 20


_HASH_MEMO_MAX = 200_000
_hash_memo: dict[tuple, str] = {}  # (path, folder, dev, inode, size, mtime, ctime) -> sha256


def file_sha256(path: Path, folder_id: FolderId | None = None) -> str:
    """Hex sha256 of a dataset file's bytes (opened as `safe_open.open_in_folder` does),
    remembered per process while the file's (device, inode, size, mtime, ctime) stay the same (the scan's
    fingerprint and the on-disk latent cache's keys hash the same files). Raises DatasetError if
    it cannot be read."""
    try:
        st = os.stat(path, follow_symlinks=False)
        memo_key: tuple | None = (
            str(path),
            folder_id,
            st.st_dev,
            st.st_ino,
            st.st_size,
            st.st_mtime_ns,
            st.st_ctime_ns,
        )
    except OSError:
        memo_key = None
    if memo_key is not None and memo_key in _hash_memo:
        return _hash_memo[memo_key]
    hexdigest = _read_sha256(path, folder_id)
    if memo_key is not None:
        if len(_hash_memo) >= _HASH_MEMO_MAX:
            _hash_memo.clear()
        _hash_memo[memo_key] = hexdigest
    return hexdigest


def _read_sha256(path: Path, folder_id: FolderId | None) -> str:
    digest = hashlib.sha256()
    try:
        with open_in_folder(path, folder_id) as fh:
            while chunk := fh.read(_HASH_CHUNK):
                digest.update(chunk)
    except OSError as err:
        raise DatasetError(f"cannot read {path.name}", [f"{path.name}: {err}"]) from None
    return digest.hexdigest()


def control_sha256(item: ImageItem) -> tuple[str, ...]:
    """The sha256 of each of the item's control images' bytes, in slot order (file_sha256)."""
    return tuple(file_sha256(c, fid) for c, fid in zip(item.controls, control_folder_ids(item), strict=True))


def check_unchanged(item: ImageItem) -> None:
    """Raise DatasetError naming the file unless the bytes of the item's image, of each of its
    controls and of its masks/ file are still those the scan read (`item.sha256`,
    `item.control_sha256`, `item.mask.sha256`; nothing to compare where they are empty). Cheap
    while a file's identity and times stay the same (file_sha256 remembers them); an edit in
    place or a file renamed over it is hashed again. A run calls it before each decode of a
    sample for training, so it fails saying what changed rather than train on an image other
    than the one its fingerprint (and a resume's check) describes."""
    files = [(item.path, item.folder_id, item.sha256)]
    if item.control_sha256:
        files += zip(item.controls, control_folder_ids(item), item.control_sha256, strict=True)
    if item.mask is not None and not item.mask.alpha:
        files.append((item.mask.path, item.mask.folder_id, item.mask.sha256))
    for path, folder_id, scanned in files:
        if scanned and file_sha256(path, folder_id) != scanned:
            raise DatasetError(
                f"{path.name} changed during the run",
                [
                    f"{path.name}: changed since the run scanned the dataset (its bytes differ); "
                    "the run cannot train on what it started with: start it again on the changed dataset"
                ],
            )


# how dataset_fingerprint keys a paired sample's controls: 1 (before session 40) by their absolute
# path, which changed with the dataset's folder (a paired run could not resume once its dataset
# moved); 2 (session 40, RELIABILITY 2040) by their path under the target's folder (`control/a.png`;
# a control_dirs folder's by its file name alone: its slot is its place in the row). Unpaired
# samples are the same under both rules; a paired run's identity records the rule
# (training/identity_dataset.py) and a resume of a rule-1 checkpoint compares under rule 1, its
# controls' paths taken under the folder the checkpoint recorded (`controls_then`)
DATASET_RULE = 2


def _control_key(control: Path, item: ImageItem, controls_then: Mapping[Path, Path] | None) -> object:
    """How the fingerprint names one control of `item`: rule 2 (controls_then None) its POSIX path
    under the target's folder, or ["outside", its name] for a control_dirs folder's; rule 1 its
    absolute path, with a current folder of `controls_then` (now -> as the checkpoint recorded it)
    replaced by the recorded one."""
    if controls_then is None:
        try:
            return control.relative_to(item.path.parent).as_posix()
        except ValueError:
            return ["outside", control.name]
    for now, then in controls_then.items():
        try:
            return str(Path(then) / control.relative_to(now))
        except ValueError:
            continue
    return str(control)


def dataset_fingerprint(items: list[ImageItem], controls_then: Mapping[Path, Path] | None = None) -> str:
    """sha256 over the items sorted by file name: (file name, sha256 of its bytes, final caption,
    and a paired sample's controls: each one's key (`_control_key`) and sha256).

    A renamed file, a changed image byte or a changed final caption (including a new trigger
    word) changes the fingerprint; the dataset's folder moved does not (DATASET_RULE 2).
    `controls_then`: None for the current rule; a mapping (folder now -> folder the checkpoint
    recorded, possibly empty) for rule 1's, a resume of a checkpoint written under it.
    Raises DatasetError if a file cannot be read.
    """
    rows = [
        [item.path.name, item.sha256 or file_sha256(item.path, item.folder_id), item.caption]
        for item in items
    ]
    for row, item in zip(rows, items, strict=True):  # paired samples: their controls too
        hashes = item.control_sha256 or control_sha256(item)
        row += [
            [_control_key(c, item, controls_then), digest]
            for c, digest in zip(item.controls, hashes, strict=True)
        ]
    rows.sort()  # file names are unique in a folder: the first column orders them
    payload = json.dumps(rows, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(b"lorastudio-dataset-v1\n" + payload).hexdigest()


def _sidecar_caption(caption_files: Sequence[Path], folder_id: FolderId, kohya: bool) -> str | None:
    """The text of an image's caption files: a kohya folder's by kohya_captions.kohya_caption
    (its .txt / .caption files, compared), a plain folder's one .txt by read_sidecar. Raises
    DatasetError naming the file(s)."""
    if kohya:
        return kohya_caption(caption_files, folder_id).text
    return read_sidecar(caption_files[0], folder_id) if caption_files else None


def scan_dataset(
    root: Path,
    *,
    resolution: int,
    multiple: int,
    aspect_buckets: bool = True,
    trigger_word: str | None = None,
    default_caption: str | None = None,
    max_pixels: int = 64_000_000,
    skip_bad_images: bool = False,
    decode_pixels: int = DEFAULT_DECODE_PIXELS,
    no_upscale: bool = False,
    control_dirs: Sequence[Path] = (),
    control_images: tuple[int, int] = (0, 0),
    family: str = "this family",
    decoded_dir: Path | None = None,
    decode_budget_s: float | None = None,
    progress: DecodeProgress | None = None,
    kohya: bool = False,
    keep_markup: bool = False,
    controls_then: Mapping[Path, Path] | None = None,
) -> DatasetScan:
    """Discover, check, caption and bucket every image of the folder `root`.

    Takes: the training `resolution` and the family's resolution `multiple`; `aspect_buckets`
    (False = every image goes to the resolution x resolution bucket); the caption settings
    (see lorastudio.data.captions for the precedence); `max_pixels`, the largest accepted
    width*height; `skip_bad_images`, True to leave corrupt/oversized images out (each listed in
    `dropped`) instead of refusing the dataset; `decode_pixels`, the most pixels one check
    decodes (settings.max_decode_pixels); `no_upscale`, True to train an image smaller than its
    bucket at the largest bucket inside its own size (data.buckets.choose_bucket) instead;
    `control_dirs` (parallel control folders), `control_images` (the family's (min, max) controls
    per image) and `family` (its name, for messages): the pairing of targets with control images
    (data/pairs.py); `decoded_dir`, where the folders' records of fully decoded images are kept
    (settings.decoded_record_dir: each image not recorded there as it is now has every pixel
    decoded, within the record's time budget, and is recorded when it passes; data/decoded.py),
    None to check headers and chunk CRCs only; `decode_budget_s`, that budget in seconds (None:
    decoded.FULL_DECODE_BUDGET_S; math.inf: every file not recorded, as the run's own scan);
    `progress`, the run's count of those decodes and its stop check (data/decode_progress.py:
    its stop check's error ends the scan, the record saved with what was decoded); `kohya`, a
    kohya `N_words` folder read in place (TrainConfig.kohya_folders): an image's caption file is
    its `.txt` or `.caption` (data/kohya_captions.py, the rule `datasets import --kohya` follows;
    two that disagree are a problem naming both); `keep_markup`, True for a resume: a caption
    holding another trainer's markup (captions.unread_markup) is kept as the text it is, as the
    checkpoint, made before such captions were refused, trained it (its fingerprint decides;
    scan_warnings says it), where a fresh run's scan refuses it (RELIABILITY 1733, 1750);
    `controls_then`, dataset_fingerprint's: None for the current rule, a mapping for a resume
    that compares a rule-1 checkpoint (training/identity_dataset.py).
    Returns: a DatasetScan with items sorted by file name.
    Raises: DatasetError, listing every problem at once: an unsupported resolution, a missing
    folder or a file instead of one, no images, images without a caption (when there is no
    trigger word and no default caption), corrupt or oversized images (unless skip_bad_images),
    unreadable caption files, bad metadata.jsonl lines and a "[trigger]" caption without a
    trigger word.
    """
    root = Path(root)
    bad_resolution = resolution_problems(resolution, multiple)
    if bad_resolution:
        raise DatasetError(f"resolution {resolution} is not supported", bad_resolution)
    files = discover(root, kohya)
    folder_id = folder_identity(root)
    if not files.images:
        raise DatasetError(
            f"no images in {root}",
            [
                f"{root}: no {'/'.join(e.lstrip('.') for e in IMAGE_EXTENSIONS)} files (sub-folders are not scanned)",
                *unused_images(root, files.dropped),
                *subfolder_hints(root),
            ],
        )
    problems: list[str] = []
    dropped = list(files.dropped)
    metadata: dict[str, str] = {}
    if files.metadata is not None:
        table = read_metadata(files.metadata, folder_id)
        problems += table.problems
        rows = match_rows(table.captions, (p.name for p in files.images))  # data/row_names.py
        metadata = rows.by_file
        dropped += [(name, f"listed in {METADATA_FILE} but not found") for name in rows.unmatched]
        dropped += [(METADATA_FILE, spelt_row_note(row, image)) for image, row in rows.spelt.items()]

    buckets = make_buckets(resolution, multiple) if aspect_buckets else [(resolution, resolution)]
    items: list[ImageItem] = []
    uncaptioned: list[str] = []
    bad_images: list[str] = []
    record = (
        None
        if decoded_dir is None
        else DecodedRecord.load(decoded_dir, root, folder_id, decode_budget_s, progress)
    )
    try:
        if record is not None:
            record.expect(files.images)
        checked = check_images([(p, folder_id) for p in files.images], max_pixels, decode_pixels, record)
        # -- paired samples (data/pairs.py): controls checked (and recorded) like the targets
        pairs = pair_controls(
            root,
            [p.name for p in files.images],
            files.metadata,
            control_dirs,
            control_images,
            family=family,
            max_pixels=max_pixels,
            decode_pixels=decode_pixels,
            folder_id=folder_id,
            record=record,
        )
    finally:
        if record is not None:
            record.save({p.name for p in files.images})
    if record is not None and record.spent_s >= 1.0:  # the worker's log says where its time went
        log.info("%s: every pixel of %d image(s) decoded in %.1f s", root, record.decoded, record.spent_s)
    for path, (info, decoded) in zip(files.images, checked, strict=True):
        if isinstance(info, DatasetError):
            err = info
            bad_images += err.problems
            if skip_bad_images:
                dropped.append((path.name, err.problems[0].split(": ", 1)[-1]))
            continue
        try:
            sidecar = _sidecar_caption(files.caption_files.get(path.stem, ()), folder_id, kohya)
        except DatasetError as err:
            problems += err.problems
            continue
        chosen = choose_caption(sidecar, metadata.get(path.name), default_caption, trigger_word)
        if chosen is None:
            uncaptioned.append(path.name)
            continue
        caption, source = chosen
        row = (metadata.get(path.name) or "").strip()
        if source == "txt" and row and row != (sidecar or "").strip():  # two captions: said which trains
            dropped.append((METADATA_FILE, overridden_row(path.name, files.caption_files[path.stem][0].name)))
        if not keep_markup and (markup := unread_markup(caption)) is not None:  # it would train as text
            problems.append(f"{path.name}: the caption {markup}")
            continue
        if TRIGGER_PLACEHOLDER in caption:
            problems.append(f"{path.name}: the caption has {TRIGGER_PLACEHOLDER} but no trigger word is set")
            continue
        bucket = choose_bucket(
            info.width, info.height, buckets, multiple, no_upscale=no_upscale, square=not aspect_buckets
        )
        items.append(
            ImageItem(
                path, caption, source, info.width, info.height, bucket, folder_id=folder_id, decoded=decoded
            )
        )

    # -- paired samples: controls attached to the items, problems reported here
    problems += pairs.problems
    items = [
        replace(
            it,
            controls=pairs.controls.get(it.path.name, ()),
            control_folder_ids=pairs.folder_ids.get(it.path.name, ()),
            control_dims=pairs.dims.get(it.path.name, ()),
            controls_decoded=pairs.decoded.get(it.path.name, ()),
        )
        for it in items
    ]
    dropped = [(name, why) for name, why in dropped if name not in pairs.folders] + pairs.unread
    if control_images[1] > 0:  # an edit family: a misspelt control folder is named as one
        misnamed = {
            n: why
            for n, was in files.dropped
            if was.startswith("sub-folder") and (why := misnamed_control_folder(n))
        }
        dropped = [(name, misnamed.get(name, why)) for name, why in dropped]
        if pairs.unpaired and control_images[0] > 0:  # the refusal says where the controls are
            problems += [f"{name}: {why}" for name, why in sorted(misnamed.items())]
    # -- end of paired samples
    if bad_images and not skip_bad_images:
        problems += [f"{p} (fix or remove it)" for p in bad_images]
    # a caption the folder holds in a form not read (kohya's .caption, a JSON sidecar, metadata.csv)
    # was meant: the image never trains on the trigger word or default caption instead, unsaid
    untold = uncaptioned + [it.path.name for it in items if it.caption_source in ("default", "trigger")]
    problems += unread_caption_problems(root, folder_id, dropped, untold, files.metadata is not None)
    if uncaptioned:
        problems += [
            f"{name}: no caption (add {Path(name).stem}.txt or a {METADATA_FILE} row, "
            "or set a trigger word or a default caption)"
            for name in uncaptioned
        ]
    if problems:
        raise DatasetError(f"dataset {root} cannot be used ({len(problems)} problem(s))", problems)
    if not items:
        raise DatasetError(f"no usable images in {root}", [f"{name}: {why}" for name, why in dropped])
    dropped.sort()
    items = [
        replace(it, sha256=file_sha256(it.path, it.folder_id), control_sha256=control_sha256(it))
        for it in items
    ]
    return DatasetScan(
        root=root,
        items=items,
        dropped=dropped,
        fingerprint=dataset_fingerprint(items, controls_then),
        control_sources=tuple(pairs.sources),
        control_dirs=tuple(control_dirs),
    )
