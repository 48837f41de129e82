"""One dataset's detail for the API (no HTTP, no torch): its images with captions, controls,
masks, sizes (as shown: after EXIF orientation) and alpha flags, a page at a time, and the
folder's dropped entries.

Built for datasets of tens of thousands of images (session 23 scale audit): the folder is listed
once per request (`discover`), the totals (images, captioned, masked, with alpha) count every
image, but only the page's images have their caption files read; an image's size and
alpha flag come from its header (and its EXIF orientation, read by Pillow where the header holds
EXIF: orientation.header_has_exif), read once per version of the file (`stored_header`: remembered
by path and file_version.version_of), so a request costs one lstat per image, not one read.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from lorastudio.data.captions import overridden_row, own_caption, read_metadata, read_sidecar, unread_markup
from lorastudio.data.discovery import METADATA_FILE, DatasetFiles, discover
from lorastudio.data.image_headers import header_info
from lorastudio.data.images import file_orientation
from lorastudio.data.kohya_listing import KohyaLayout, kohya_detail_rows, kohya_dropped, kohya_layout
from lorastudio.data.listing import summary_of
from lorastudio.data.masks import MASKS_DIR, clash_problem, file_has_alpha, mask_index
from lorastudio.data.orientation import header_has_exif, upright_size
from lorastudio.data.pair_listing import listed_controls
from lorastudio.data.pairs import misnamed_control_folder
from lorastudio.data.paths import stem_key
from lorastudio.data.peer_files import name_key
from lorastudio.data.row_names import match_rows, spelt_row_note
from lorastudio.data.safe_open import open_in_folder
from lorastudio.data.upload_pairs import control_slot
from lorastudio.errors import DatasetError
from lorastudio.file_version import version_of

_HEADERS_MAX = 200_000  # remembered headers (a few hundred bytes each); cleared when full
_headers: dict[tuple[Any, ...], dict[str, Any]] = {}
_headers_lock = threading.Lock()


def stored_header(path: Path) -> dict[str, Any] | None:
    """{"bytes", "width", "height", "alpha"} of an image file, from one read of its header
    (`header_info`: width and height None where it cannot be read; the size as shown and
    trained, after its EXIF orientation: images.file_orientation, asked only where the header
    holds EXIF); Pillow is asked for the alpha flag only where the header cannot tell. Remembered per process by path and
    file version (file_version.version_of): a file's header is read once per version. None when the file is gone."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    key = (str(path), *version_of(st))
    with _headers_lock:
        known = _headers.get(key)
    if known is not None:
        return known
    info, exif = None, False
    try:
        with open_in_folder(path) as fh:
            info = header_info(fh)
            fh.seek(0)
            exif = header_has_exif(fh)
    except (DatasetError, OSError):
        pass
    if info is None:
        row: dict[str, Any] = {"bytes": st.st_size, "width": None, "height": None, "alpha": False}
    else:
        alpha = file_has_alpha(path) if info.alpha is None else info.alpha
        width, height = upright_size(info.width, info.height, file_orientation(path) if exif else 1)
        row = {"bytes": st.st_size, "width": width, "height": height, "alpha": alpha}
    with _headers_lock:
        if len(_headers) >= _HEADERS_MAX:
            _headers.clear()
        _headers[key] = row
    return row


def dataset_detail(folder: Path, offset: int = 0, limit: int | None = None) -> dict[str, Any]:
    """The detail of the dataset `folder` (an existing folder): its summary (`listing.summary_of`)
    with `masked` and `with_alpha` totals, `total_files`, `offset` and `limit`; `files`: the images
    [offset, offset + limit) by name (limit None: to the end), each with its caption (a .txt
    wins over metadata.jsonl), controls (relative paths, slot order), mask, size (after EXIF orientation), alpha
    flag and `markup`: why its caption would train another trainer's markup as text, which a fresh run
    refuses (captions.unread_markup's words completing "the caption ...", null when none; the page's
    captions only, as they are the ones read: RELIABILITY 1830); `dropped`: the folder's entries not used (links, sub-folders, other files, orphan
    controls, clashing masks, metadata.jsonl problems, its rows naming no image and its rows
    read under another spelling, as the run's scan lists them: data/row_names.py) and the page's caption files that cannot
    be read, each with its reason. Raises DatasetError when the folder cannot be listed."""
    files = discover(folder)
    if (layout := kohya_layout(folder, files)) is not None:  # its N_words folders' images (2201)
        return _kohya_detail(folder, files, layout, offset, limit)
    masks, clashes = mask_index(folder)  # loss masks (data/masks.py): masks/<stem>.*, by stem_key (NFC)
    dropped = [(n, r) for n, r in files.dropped if not (masks and n == MASKS_DIR)]
    for stem, names in clashes.items():  # a run refuses them: no mask is shown
        masks.pop(stem)
        dropped += [(f"{MASKS_DIR}/{n}", clash_problem(stem, names).split(": ", 1)[1]) for n in names]
    rows: dict[str, str] = {}
    if files.metadata:
        try:
            table = read_metadata(files.metadata)
            matched = match_rows(table.captions, (p.name for p in files.images))  # as the scan matches
            rows = matched.by_file
            dropped += [(METADATA_FILE, p.removeprefix(f"{METADATA_FILE} ")) for p in table.problems]
            if matched.unmatched:  # one pass over the images, however many rows name none
                by_key = {name_key(p.name): p for p in files.images}
                dropped += [(n, _unmatched_row(n, by_key, files, rows)) for n in matched.unmatched]
            dropped += [(METADATA_FILE, spelt_row_note(row, image)) for image, row in matched.spelt.items()]
        except DatasetError as err:
            dropped += [(METADATA_FILE, p.removeprefix(f"{METADATA_FILE}: ")) for p in err.problems]
    controls, orphans = listed_controls(folder, files.images)
    dropped = [(n, why) for n, why in dropped if control_slot(n) is None]  # control/ folders are read
    dropped = [  # a control folder spelt otherwise (Control/, controls/) is named as one
        (n, (why.startswith("sub-folder") and misnamed_control_folder(n)) or why) for n, why in dropped
    ]
    dropped += [(o, "control image with no target of the same name") for o in orphans]
    headers = {p.name: stored_header(p) for p in files.images}  # None: deleted since listed
    present = [p for p in files.images if headers[p.name] is not None]
    images = []
    for path in present[offset : None if limit is None else offset + limit]:
        sidecar = files.sidecars.get(path.stem)
        caption = rows.get(path.name)
        if sidecar:
            try:
                text = read_sidecar(sidecar)
                row = (rows.get(path.name) or "").strip()
                if row and text and row != text.strip():  # as the scan lists it (a run's preflight)
                    dropped.append((METADATA_FILE, overridden_row(path.name, sidecar.name)))
                caption = own_caption(text, caption)  # a blank .txt: the row trains (2070)
            except DatasetError as err:
                caption = None
                dropped += [(sidecar.name, p.removeprefix(f"{sidecar.name}: ")) for p in err.problems]
        mask = masks.get(stem_key(path.name))
        images.append(
            {
                "file": path.name,
                "caption": caption,
                "controls": controls.get(path.name, []),
                "mask": mask.name if mask else None,
                "markup": None if caption is None else unread_markup(caption),  # a fresh run refuses it
                **headers[path.name],  # type: ignore[dict-item]
            }
        )
    return {
        **summary_of(folder, files),
        "masked": sum(1 for p in present if stem_key(p.name) in masks),
        "with_alpha": sum(1 for p in present if headers[p.name]["alpha"]),  # type: ignore[index]
        "total_files": len(present),
        "offset": offset,
        "limit": limit,
        "files": images,
        "dropped": [{"file": n, "reason": r} for n, r in dropped],
    }


def _unmatched_row(row: str, by_key: dict[str, Path], files: DatasetFiles, rows: dict[str, str]) -> str:
    """Why metadata.jsonl's row `row`, naming no image (data/row_names.match_rows), is not used, as
    the run's scan says it; where it names an image another way (`X.PNG` for x.png, a half-composed
    accent) whose image has no caption of its own (no row, no caption file), the run refuses the
    dataset (data/peer_files.unread_caption_problems), and this says so: the list and the page
    called it usable before, the run alone refused it."""
    why = f"listed in {METADATA_FILE} but not found"
    image = by_key.get(name_key(row.rpartition("/")[2]))  # (as peer_files' by_name: one of two alike)
    if image is not None and image.name not in rows and image.stem not in files.sidecars:
        return (
            f"{why}; a run refuses the dataset: {image.name} has no caption of its own (a row's file_name is "
            f"the image's own name in this folder: {image.name}; or delete the row to train without it)"
        )
    return why


def _kohya_detail(
    folder: Path, files: DatasetFiles, layout: KohyaLayout, offset: int, limit: int | None
) -> dict[str, Any]:
    """dataset_detail of a kohya layout read in place (data/kohya_listing.py): its folders' images
    as `<folder>/<name>` with their folder's repeats and the caption a run of the folders reads;
    its kohya folders are read, not dropped."""
    page, problems, present, with_alpha = kohya_detail_rows(layout, offset, limit, stored_header)
    return {
        **summary_of(folder, files),
        "masked": 0,  # a kohya folder's masks/ is not read by a run of the folders
        "with_alpha": with_alpha,
        "total_files": present,
        "offset": offset,
        "limit": limit,
        "files": page,
        "dropped": [{"file": n, "reason": r} for n, r in kohya_dropped(files, layout) + problems],
    }
