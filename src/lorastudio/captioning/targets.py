"""Which images of a dataset get a caption, and writing one (atomically, no torch).

An image counts as captioned when it has a non-blank `<stem>.txt` or metadata.jsonl row (a
sidecar that cannot be read also counts: it is not clobbered unless `overwrite`). New captions
go where the dataset keeps its captions: into metadata.jsonl when the dataset has one and no .txt
sidecars (the row's other keys, e.g. kohya repeats, are kept; a missing row is appended), else
into `<stem>.txt`. Every write is staged then renamed (data.writes.staged_write) under the
dataset's lock, so a stop or a kill at any moment leaves each caption file old or new, never
half-written. A caption is one line of text, capped at MAX_CAPTION_BYTES like every caption.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lorastudio.data.captions import MAX_CAPTION_BYTES, apply_trigger, read_metadata, read_sidecar
from lorastudio.data.discovery import METADATA_FILE, discover
from lorastudio.data.image_edits import write_caption
from lorastudio.data.writes import dataset_lock, staged_write
from lorastudio.errors import DatasetError

CaptionStore = Literal["txt", "metadata"]
_SPACES = re.compile(r"\s+")
_REPLACEMENT = "\ufffd"  # the decoder's stand-in for bytes that are no character


@dataclass(frozen=True)
class CaptionPlan:
    """todo: images to caption (by name order); skipped: names of images that keep their caption;
    store: where new captions go."""

    todo: list[Path]
    skipped: list[str]
    store: CaptionStore


def plan_captions(folder: Path, overwrite: bool) -> CaptionPlan:
    """The images of dataset `folder` to caption (all of them with `overwrite`). Raises
    DatasetError when the folder is missing or cannot be listed / its metadata.jsonl read."""
    files = discover(folder)
    rows = read_metadata(files.metadata).captions if files.metadata is not None else {}
    store: CaptionStore = "metadata" if files.metadata is not None and not files.sidecars else "txt"
    todo, skipped = [], []
    for image in files.images:
        if not overwrite and _has_caption(image, files.sidecars.get(image.stem), rows):
            skipped.append(image.name)
        else:
            todo.append(image)
    return CaptionPlan(todo, skipped, store)


def _has_caption(image: Path, sidecar: Path | None, rows: dict[str, str]) -> bool:
    if rows.get(image.name):
        return True
    if sidecar is None:
        return False
    try:
        return read_sidecar(sidecar) is not None
    except DatasetError:
        return True  # unreadable: kept as it is


def clean_caption(text: str, prefix: str | None = None) -> str:
    """One line: control and format characters dropped, and U+FFFD (what a byte-level
    tokenizer decodes from a character cut by max_tokens or an invalid byte sequence: no text of
    the image), whitespace runs made one space, `prefix` put first ("<prefix>, <caption>", not
    doubled), cut to MAX_CAPTION_BYTES on a character boundary. Raises ValueError when nothing
    is left of the model's text."""
    kept = "".join(" " if unicodedata.category(ch)[0] == "C" or ch == _REPLACEMENT else ch for ch in text)
    caption = _SPACES.sub(" ", kept).strip()
    if not caption:
        raise ValueError("the model gave an empty caption")
    caption = apply_trigger(caption, prefix)
    return caption.encode("utf-8")[:MAX_CAPTION_BYTES].decode("utf-8", errors="ignore").strip()


def store_caption(folder: Path, image: Path, caption: str, store: CaptionStore) -> None:
    """Write `caption` for `image` into `store` (see the module docstring). Raises DatasetError
    (caption too long, metadata.jsonl unreadable), NoSpaceLeft, OSError."""
    with dataset_lock(folder.parent, folder.name):
        if store == "txt":
            write_caption(folder, image.name, caption)
        else:
            _write_metadata_row(folder / METADATA_FILE, image.name, caption)


def _write_metadata_row(path: Path, name: str, caption: str) -> None:
    """Set the caption of row `name` in metadata.jsonl (other keys and other lines kept as they
    are), appending a row when there is none; staged then renamed."""
    read_metadata(path)  # bounded read: raises on a file over the caps before it is loaded
    lines = path.read_text(encoding="utf-8-sig").splitlines()
    found = False
    for i, line in enumerate(lines):
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a bad line stays as it was (the preflight names it)
        if isinstance(row, dict) and str(row.get("file_name", "")).strip().removeprefix("./") == name:
            row["caption" if "caption" in row and "text" not in row else "text"] = caption
            lines[i] = json.dumps(row, ensure_ascii=False)
            found = True
    if not found:
        lines.append(json.dumps({"file_name": name, "text": caption}, ensure_ascii=False))
    with staged_write(path) as tmp:
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
