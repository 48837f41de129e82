"""A kohya layout read in place, listed as a run reads it (no torch, no HTTP; RELIABILITY 2201).

A dataset folder with no image at its top level whose every visible sub-folder is a kohya
`N_words` folder (`datasets/k/10_sks/*.png`) is what a run with `kohya_folders = true` reads
(data/kohya.kohya_entries: one entry per folder, repeats N, each image's `.txt` / `.caption`
compared: data/kohya_captions.kohya_caption) and what the caption job captions in place (fix
2053). The Datasets list counted 0 images in it and its page listed none, naming `10_sks` as a
dropped sub-folder, so the web never offered "Caption with AI". Here the listing (data/listing.py)
and the dataset's page (data/dataset_detail.py) count and list such a layout's images under
`<folder>/<name>` (the names the caption job's events use), each with its folder's repeats.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lorastudio.data.discovery import DatasetFiles, discover
from lorastudio.data.kohya import KohyaFolder, is_kohya_folder, parse_kohya_folder
from lorastudio.errors import DatasetError, NotFound

KohyaLayout = list[tuple[Path, KohyaFolder, DatasetFiles]]  # (folder, its name read, its listing)


def kohya_sub_folders(folder: Path) -> list[Path] | None:
    """The kohya `N_words` sub-folders of `folder` (sorted by name) when every visible
    sub-folder is one (links never followed), as a run reading the layout in place requires
    (data/kohya.kohya_entries); None when there is none or another sub-folder beside them."""
    try:
        with os.scandir(folder) as it:
            subs = sorted(
                (Path(e.path) for e in it if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)),
                key=lambda p: p.name,
            )
    except OSError:
        return None
    if not subs or not all(is_kohya_folder(sub.name) for sub in subs):
        return None
    return subs


def kohya_layout(folder: Path, files: DatasetFiles) -> KohyaLayout | None:
    """The kohya folders of `folder` (`files`: its own listing) with their listings
    (discover(kohya=True)) when it is a kohya layout read in place: no image at its top level, its
    every visible sub-folder a kohya one (kohya_sub_folders); None for any other folder. A
    sub-folder that cannot be listed is left out (its page names it dropped)."""
    if files.images:
        return None
    subs = kohya_sub_folders(folder)
    if subs is None:
        return None
    out: KohyaLayout = []
    for sub in subs:
        try:
            out.append((sub, parse_kohya_folder(sub.name), discover(sub, kohya=True)))
        except DatasetError:
            continue
    return out


def kohya_counts(layout: KohyaLayout) -> dict[str, int]:
    """{"images", "captions", "markup_captions"} of a kohya layout: every folder's images, those
    with a caption of their own that is not blank (the first of its `.txt` / `.caption` files, as
    markup_count reads a plain folder's; the others the folder's words train) and those whose
    caption holds another trainer's markup."""
    from lorastudio.data.markup_count import caption_marks

    images = captions = markup = 0
    for sub, _, files in layout:
        marks = caption_marks(sub, files)
        images += len(files.images)
        captions += sum(1 for p in files.images if p.stem in files.sidecars and p.name not in marks.blank_txt)
        markup += marks.markup
    return {"images": images, "captions": captions, "markup_captions": markup}


def kohya_dropped(files: DatasetFiles, layout: KohyaLayout) -> list[tuple[str, str]]:
    """The entries of a kohya layout not used: the top level's other than its kohya folders (which
    are read, not dropped) and each folder's, named `<folder>/<name>`."""
    folders = {sub.name for sub, _, _ in layout}
    dropped = [(n, why) for n, why in files.dropped if n not in folders]
    for sub, _, sub_files in layout:
        dropped += [(f"{sub.name}/{n}", why) for n, why in sub_files.dropped]
    return dropped


def kohya_files(layout: KohyaLayout) -> list[tuple[str, Path, int, tuple[Path, ...]]]:
    """(listed name `<folder>/<name>`, path, the folder's repeats, its caption files) of every
    image of a kohya layout, by listed name."""
    out = [
        (f"{sub.name}/{p.name}", p, kohya.repeats, files.caption_files.get(p.stem, ()))
        for sub, kohya, files in layout
        for p in files.images
    ]
    return sorted(out, key=lambda row: row[0])


def kohya_caption_text(captions: tuple[Path, ...]) -> tuple[str | None, list[str]]:
    """(the caption a run reads from an image's kohya caption files, the problems that refuse it):
    kohya_captions.kohya_caption's text, or None with its problems (two that disagree, unreadable)."""
    from lorastudio.data.kohya_captions import kohya_caption

    try:
        return kohya_caption(captions).text, []
    except DatasetError as err:
        return None, list(err.problems)


def kohya_image(dataset_dir: Path, listed: str) -> tuple[Path, str]:
    """(the kohya folder, the image's own name) of an image a kohya layout lists as
    `<folder>/<name>`. Raises NotFound when `listed` is not one folder and one name, or its
    folder is no kohya folder of `dataset_dir` (a link is none)."""
    folder, sep, name = listed.partition("/")
    sub = dataset_dir / folder
    if not sep or "/" in name or not is_kohya_folder(folder) or sub.is_symlink() or not sub.is_dir():
        raise NotFound(f"no image {listed!r} in dataset {dataset_dir.name}")
    return sub, name


def kohya_detail_rows(
    layout: KohyaLayout, offset: int, limit: int | None, header: Any
) -> tuple[list[dict[str, Any]], list[tuple[str, str]], int, int]:
    """(the page's file rows, the caption problems of the page's images, images present, those
    with alpha) of a kohya layout's detail; `header`: dataset_detail.stored_header."""
    from lorastudio.data.captions import unread_markup

    rows = kohya_files(layout)
    headers = {name: header(path) for name, path, _, _ in rows}  # None: deleted since listed
    present = [row for row in rows if headers[row[0]] is not None]
    page, dropped = [], []
    for name, _path, repeats, captions in present[offset : None if limit is None else offset + limit]:
        caption, problems = kohya_caption_text(captions)
        dropped += [(name, p) for p in problems]  # the run refuses the image: said where it is listed
        page.append(
            {
                "file": name,
                "caption": caption,
                "controls": [],
                "mask": None,
                "markup": None if caption is None else unread_markup(caption),
                "repeats": repeats,
                **headers[name],
            }
        )
    with_alpha = sum(1 for row in present if headers[row[0]]["alpha"])
    return page, dropped, len(present), with_alpha


def write_kohya_caption(dataset_dir: Path, listed: str, caption: str, expected: str | None) -> Path | None:
    """Set the caption of a kohya layout's image listed as `<folder>/<name>` (the page's edit of
    it, PUT /api/datasets/{name}/captions/{file}) as a run of the folders reads it: into its one
    `.txt` / `.caption` file (a `.txt` written beside a `.caption` would be a second caption the run
    compares), else a new `<stem>.txt`; an empty caption removes each of them (the folder's words
    train it then). No metadata.jsonl is read or written (a run of the folders reads none).
    `expected`: as image_edits.write_caption's (CaptionConflict when the caption a run reads now
    is another). Returns the caption path (None when removed). Raises NotFound (no such image),
    DatasetError (two caption files: the run compares them, so which to write is the user's
    choice; or a caption write_caption refuses), CaptionConflict, NoSpaceLeft."""
    from lorastudio.data.image_edits import existing_image, write_caption
    from lorastudio.errors import CaptionConflict

    sub, name = kohya_image(dataset_dir, listed)
    image = existing_image(sub, name)
    captions = discover(sub, kohya=True).caption_files.get(image.stem, ())
    if expected is not None:
        now, problems = kohya_caption_text(captions)
        if problems or (now or "") != expected.strip():
            raise CaptionConflict(
                f"the caption of {listed} changed since it was read (another tab or person): it is now "
                f"{now or ''!r}; nothing was written",
                now or "",
            )
    if len(captions) > 1 and caption.strip():
        names = " and ".join(p.name for p in captions)
        raise DatasetError(
            f"caption of {listed} not written",
            [f"{listed}: {names} are each its caption (a run of the folder compares them): keep one of them"],
        )
    if not caption.strip():
        for path in captions:  # every one: the one left would be its caption
            path.unlink(missing_ok=True)
        return None
    return write_caption(sub, name, caption, sync_row=False, target=captions[0] if captions else None)


def delete_kohya_image(dataset_dir: Path, listed: str) -> list[str]:
    """Delete a kohya layout's image listed as `<folder>/<name>` (DELETE
    /api/datasets/{name}/images/{file}) with its `.txt` / `.caption` files unless another image of
    its stem in that folder reads them (a.jpg beside a.png); the image goes last (a delete cut
    short and sent again completes). Returns the deleted names as listed (`<folder>/<name>`).
    Raises NotFound (no such image), and what the unlinks raise (OSError)."""
    from lorastudio.data.image_edits import existing_image
    from lorastudio.data.writes import dataset_lock

    sub, name = kohya_image(dataset_dir, listed)
    image = existing_image(sub, name)
    with dataset_lock(dataset_dir.parent, dataset_dir.name):
        files = discover(sub, kohya=True)
        shared = any(p.stem == image.stem and p.name != image.name for p in files.images)
        captions = () if shared else files.caption_files.get(image.stem, ())
        for path in captions:
            path.unlink(missing_ok=True)
        image.unlink()
    return [f"{sub.name}/{p.name}" for p in (image, *captions)]


def kohya_upload_refusal(folder: Path) -> str | None:
    """Why an upload into `folder` is refused when it is a kohya layout read in place (kohya
    sub-folders only, no image at its top level): a file stored at its top level would end the
    layout (its list and page would show that file alone, and a run with kohya_folders never reads
    it); None for any other folder (one that cannot be listed too: the upload names that)."""
    from lorastudio.data.discovery import is_image_name

    subs = kohya_sub_folders(folder)
    if subs is None:
        return None
    try:
        with os.scandir(folder) as it:
            if any(is_image_name(e.name) for e in it):
                return None
    except OSError:
        return None
    names = ", ".join(f"{sub.name}/" for sub in subs[:3]) + (" ..." if len(subs) > 3 else "")
    return (
        f"{folder.name} is a kohya layout read in place (its images are in {names}): a file at its top level "
        "would end the layout, and a run with kohya_folders reads only its N_words folders; copy the file into "
        "one of them on the server, or upload into another dataset"
    )
