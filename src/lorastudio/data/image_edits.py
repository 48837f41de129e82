"""Edits of one image of a dataset (no torch, no HTTP): set its caption, delete it with its
caption, control images and masks. Both hold the dataset's lock (data/writes.py) or write staged.

An image's row in metadata.jsonl goes with it (delete) and with a caption cleared: left there, the
row's old caption came back as the image's caption (a cleared caption, or a new upload of the
same name). No library edits a jsonl caption table in place, so this does: the file is rewritten
staged, every other line kept byte for byte (lines that are not rows included: the run reports
those)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from lorastudio import json_read
from lorastudio.data.captions import (
    caption_problem,
    one_newline_form,
    own_caption,
    read_metadata,
    read_sidecar,
)
from lorastudio.data.discovery import CAPTION_EXTENSION, METADATA_FILE, caption_files_of, is_image_name
from lorastudio.data.masks import masks_of
from lorastudio.data.paths import existing_component, nfc, stem_key
from lorastudio.data.row_names import folder_rows
from lorastudio.data.upload_pairs import controls_of
from lorastudio.data.writes import dataset_lock, staged_write
from lorastudio.errors import CaptionConflict, DatasetError, NotFound, writing
from lorastudio.text_rules import visible_text


def write_caption(
    dataset_dir: Path,
    image_name: str,
    caption: str,
    expected: str | None = None,
    *,
    sync_row: bool = True,
    target: Path | None = None,
) -> Path | None:
    """Set the .txt caption of image `image_name` (staged, then renamed): the caption file a scan
    reads (discovery.caption_files_of: `a.TXT` too), else `<stem>.txt`; an empty caption removes its .txt
    files and the image's metadata.jsonl row. Returns the caption path (None when removed). Raises NotFound when the
    image does not exist, ConfigError/PathOutsideRoot for a bad name, DatasetError if too long or
    holding a character no text a user gives may (text_rules.visible_text: an ESC sequence, U+202E,
    a zero-width space; line breaks and tabs are allowed, CR LF written as LF: RELIABILITY 1033),
    NoSpaceLeft on a full disk. `target`: the caption file to write instead (a kohya folder's
    `<stem>.caption` when it is the image's one caption file: a `.txt` beside it would be a second
    caption a run compares, captioning/plan.py). With `sync_row`, the image's metadata.jsonl row, if it holds a
    caption, is given the new one too (_sync_row). With `expected` (the caption the edit started from, "" for none),
    CaptionConflict when the image's caption is another one now (the caller holds the dataset's
    write claim, so nothing changes it between the check and the write)."""
    if "/" in image_name and target is None:  # a kohya layout's `<folder>/<name>` (RELIABILITY 2201)
        from lorastudio.data.kohya_listing import write_kohya_caption

        return write_kohya_caption(dataset_dir, image_name, caption, expected)
    image = existing_image(dataset_dir, image_name)
    if expected is not None and (now := current_caption(dataset_dir, image)) != expected.strip():
        raise CaptionConflict(
            f"the caption of {image.name} changed since it was read (another tab or person): it is now "
            f"{now!r}; nothing was written",
            now,
        )
    files = caption_files_of(image)
    if target is None:
        target = files[0] if files else image.with_suffix(CAPTION_EXTENSION)  # the one a scan reads
    text = one_newline_form(caption).strip()
    if not text:
        for path in files:  # every one: a second .TXT left would become the caption
            path.unlink(missing_ok=True)
        drop_metadata_row(dataset_dir, image.name)  # else its old caption would be the image's
        return None
    if (why := caption_problem(text)) is not None:  # a scan would refuse it (captions.read_sidecar)
        raise DatasetError(f"caption of {image_name} refused", [f"{image_name}: {why}"])
    try:
        visible_text(text, "the caption")
    except ValueError as err:
        raise DatasetError(f"caption of {image_name} refused", [f"{image_name}: {err}"]) from None
    with writing(f"the caption of {image_name} could not be written", target), staged_write(target) as tmp:
        tmp.write_text(text + "\n", encoding="utf-8")
    if sync_row:  # a caption job syncs its rows in batches (captioning/targets.CaptionWriter)
        _sync_row(dataset_dir, image.name, text)
    return target


def _sync_row(dataset_dir: Path, image_name: str, text: str) -> None:
    """Give `image_name`'s metadata.jsonl row (if it has one with a caption) the caption `text`
    just written to its .txt, its other keys kept: the .txt wins, so an old text left in the row
    would be a second caption the scan names as unused (RELIABILITY 1735). A metadata.jsonl that
    cannot be read is left as it is (the scan refuses it, naming it)."""
    from lorastudio.data.metadata_write import set_metadata_captions

    table = dataset_dir / METADATA_FILE
    if table.is_symlink() or not table.is_file():
        return
    try:
        row = folder_rows(read_metadata(table).captions, dataset_dir).get(image_name)  # as the scan (2200)
    except DatasetError:
        return
    if row is not None and row.strip() and one_newline_form(row).strip() != text:
        set_metadata_captions(table, {image_name: text}, append_missing=False)


def delete_image(dataset_dir: Path, image_name: str) -> list[str]:
    """Delete image `image_name`, and its .txt caption, control images (control/ folders) and
    loss masks (masks/) unless another image of the same stem (a.jpg beside a.png) still uses
    them. Returns the deleted file names (controls as "control/a.png", masks as "masks/a.png").

    The image goes last: a kill -9 or a failed write part-way (a read-only control folder) leaves
    the image listed with what is left of its files, and the delete sent again completes; the
    image first left its controls and masks orphans (which a run refuses) that no image delete
    could reach any more (404)."""
    if "/" in image_name:  # a kohya layout's `<folder>/<name>` (RELIABILITY 2201)
        from lorastudio.data.kohya_listing import delete_kohya_image

        return delete_kohya_image(dataset_dir, image_name)
    image = existing_image(dataset_dir, image_name)
    with (
        dataset_lock(dataset_dir.parent, dataset_dir.name),
        writing(f"{image.name} of {dataset_dir.name} could not be deleted", dataset_dir),
    ):
        captions = caption_files_of(image)  # listed while the image is there
        others = [p.name for p in dataset_dir.iterdir() if is_image_name(p.name) and p.name != image.name]
        # a .txt goes with the images of exactly its stem (discovery), controls and masks with
        # those of its stem in NFC (stem_key): an NFD twin of the name keeps only the latter
        paired: list[str] = []
        if not any(stem_key(n) == stem_key(image.name) for n in others):  # else they stay its twin's
            for other in [*controls_of(dataset_dir, image.stem), *masks_of(dataset_dir, image.stem)]:
                other.unlink()  # its control images and masks would be orphans, which a run refuses
                paired.append(other.relative_to(dataset_dir).as_posix())
        captioned: list[str] = []
        if not any(Path(n).stem == image.stem for n in others):
            for caption in captions:  # a.txt, a.TXT: each of its stem
                caption.unlink(missing_ok=True)
                captioned.append(caption.name)
        deleted = [image.name]
        if drop_metadata_row(dataset_dir, image.name):
            deleted.append(f"{METADATA_FILE} row of {image.name}")
        image.unlink()
    return deleted + captioned + paired


def drop_metadata_row(dataset_dir: Path, image_name: str) -> bool:
    """Remove the rows of `image_name` ("x.png" or "./x.png"; or the one row the scan reads as its,
    spelt otherwise: data/row_names.py) from the dataset's metadata.jsonl,
    staged; the caller holds the dataset's lock or its write claim (jobs/dataset_claims.py: the
    API's edits). Returns whether a row was removed (False: no
    file, or no such row)."""
    table = dataset_dir / METADATA_FILE
    if table.is_symlink() or not table.is_file():
        return False
    lines = table.read_bytes().splitlines(keepends=True)
    names = [_row_name(line) for line in lines]
    drop = {image_name}
    if image_name not in names:  # its row spelt otherwise, as the scan reads it (RELIABILITY 2200)
        drop.add(folder_rows({n: n for n in names if n is not None}, dataset_dir).get(image_name, image_name))
    kept = [line for line, name in zip(lines, names, strict=True) if name not in drop]
    if len(kept) == len(lines):
        return False
    with (
        writing(f"{METADATA_FILE} of {dataset_dir.name} could not be rewritten", table),
        staged_write(table) as tmp,
    ):
        tmp.write_bytes(b"".join(kept))
    return True


def _row_name(line: bytes) -> str | None:
    """The file name a metadata.jsonl line is the row of (None: not a row)."""
    try:
        row = json_read.loads(line.decode("utf-8").removeprefix("\ufeff"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    name = row.get("file_name") if isinstance(row, dict) else None
    return name.strip().removeprefix("./") if isinstance(name, str) else None


def current_caption(dataset_dir: Path, image: Path) -> str:
    """The caption image `image` has now, as the dataset's detail shows it and a run trains it
    (captions.own_caption): its .txt unless blank, else its metadata.jsonl row; "" for none.
    Raises DatasetError when its .txt cannot be read."""
    files = caption_files_of(image)
    text = read_sidecar(files[0]) if files else None
    if text and text.strip():
        return text
    table = dataset_dir / METADATA_FILE
    if table.is_symlink() or not table.is_file():
        return ""
    try:
        rows = folder_rows(read_metadata(table).captions, dataset_dir)  # as the scan matches them (2200)
        return own_caption(text, rows.get(image.name)) or ""
    except DatasetError:
        return ""


def existing_image(dataset_dir: Path, image_name: str) -> Path:
    """The path of image `image_name` directly in `dataset_dir` (not a symlink): the file of
    exactly that name (as the dataset listing gives it: a name made by hand may be in NFD, over
    the 100 characters or hold characters that safe_component refuses to create, and the run
    trains on it), else the file of its NFC form (what uploads store). Raises PathOutsideRoot /
    ConfigError for a name that is not one file name (paths.existing_component), NotFound if it
    is not an existing image. A kohya layout's image is looked up by its listed `<folder>/<name>`
    in that kohya folder (data/kohya_listing.kohya_image: NotFound for any other folder)."""
    if "/" in image_name:  # a kohya layout's image, listed as `<folder>/<name>` (RELIABILITY 2201)
        from lorastudio.data.kohya_listing import kohya_image

        folder, name = kohya_image(dataset_dir, image_name)
        return existing_image(folder, name)
    existing_component(image_name, field="file name")
    for name in dict.fromkeys((image_name, nfc(image_name))):
        path = dataset_dir / name
        try:
            if is_image_name(name) and stat.S_ISREG(os.lstat(path).st_mode):  # a link is not one
                return path
        except OSError:  # missing, or the NFC form over the name limit
            continue
    raise NotFound(f"no image {nfc(image_name)!r} in dataset {dataset_dir.name}")
