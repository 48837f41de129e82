"""Set captions in a dataset's metadata.jsonl: one rewrite, line by line as it is read (no torch).

The writers of captions into metadata.jsonl (the auto-captioner's metadata store,
captioning/targets.py; the bulk caption edit, data/caption_bulk.py) go through
`set_metadata_captions`. It splits the file where `data.captions.read_metadata` does, at b"\\n"
only: a JSON string may hold U+2028, U+2029 or U+0085 raw (json.dumps(ensure_ascii=False)
writes them so), and `str.splitlines` cut such a row in two, leaving two bad lines and the
image's caption lost. A line that is not a row (bad JSON, bad UTF-8, a blank line) is kept as
its exact bytes; a changed row keeps every other key; the file is staged, then renamed; a full
disk is NoSpaceLeft.
"""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path

from lorastudio import json_read
from lorastudio.capped_read import read_capped
from lorastudio.data.captions import MAX_METADATA_BYTES, METADATA_CONTROL_KEYS
from lorastudio.data.safe_open import open_in_folder
from lorastudio.data.writes import staged_write
from lorastudio.errors import DatasetError, writing

_BOM = b"\xef\xbb\xbf"


def _read_bounded(path: Path) -> bytes:
    """The bytes of metadata.jsonl, opened in its folder without following a link (the folder
    swapped for a link meanwhile is refused here, before anything is written through it).
    Raises DatasetError when it is missing, a link, not a regular file or larger than
    MAX_METADATA_BYTES."""
    with open_in_folder(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > MAX_METADATA_BYTES:
            raise DatasetError(
                f"{path.name} is too large",
                [f"{path.name}: {size:,} bytes, larger than the {MAX_METADATA_BYTES // 2**20} MB allowed"],
            )
        return read_capped(fh, MAX_METADATA_BYTES + 1)


def row_line(row: object) -> bytes:
    """One metadata.jsonl row as the line's UTF-8 bytes (no newline): its text as written
    (ensure_ascii=False), or ASCII-escaped where a string of it holds a lone surrogate (JSON's
    "\\udcff", kept from the row as read: it has no UTF-8, and encoding it raised
    UnicodeEncodeError past every handler; RELIABILITY 2221). Read back, both are the same row."""
    text = json.dumps(row, ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(row).encode("ascii")


def _row_name(line: bytes) -> tuple[dict[str, object], str] | None:
    """(row, its file name as read_metadata reads it) of one line, or None (not a row)."""
    try:
        row = json_read.loads(line.removeprefix(_BOM).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(row, dict) or not isinstance(row.get("file_name"), str):
        return None
    return row, row["file_name"].strip().removeprefix("./")


def _caption_key(row: dict[str, object]) -> str:
    """The key read_metadata takes the caption from ("text" first); "text" for a row with none."""
    return "caption" if "caption" in row and "text" not in row else "text"


def set_metadata_captions(path: Path, captions: dict[str, str], *, append_missing: bool) -> None:
    """Set the caption of each file named in `captions` (file name -> caption) in the
    metadata.jsonl at `path` (every row of that name; other keys, lines and bytes kept), and
    with `append_missing` append a row {"file_name", "text"} for each name that has none.
    The caller holds the dataset's lock (data.writes.dataset_lock). Raises DatasetError (a link,
    over the size cap), NoSpaceLeft (a full disk: the file is unchanged), WriteFailed, OSError."""
    text = metadata_with_captions(path, captions, append_missing=append_missing)
    with (
        writing(f"{path.name} of {path.parent.name} could not be written", path.parent),
        staged_write(path) as tmp,
    ):
        tmp.write_bytes(text)


def metadata_with_captions(path: Path, captions: dict[str, str], *, append_missing: bool) -> bytes:
    """The bytes `set_metadata_captions` writes to the metadata.jsonl at `path` (nothing
    written). Raises DatasetError (a link, over the size cap), OSError (unreadable)."""
    raw = _read_bounded(path)
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the last line's newline
    found: set[str] = set()
    spelt = _spelt_rows(lines, captions, path.parent)  # a row's name -> the image it is read as
    for i, line in enumerate(lines):
        body, cr = (line[:-1], b"\r") if line.endswith(b"\r") else (line, b"")
        named = _row_name(body)
        if named is None or (named[1] not in captions and named[1] not in spelt):
            continue
        row, name = named
        if name in spelt:  # the row the scan reads as this image's: written under the image's name
            name = spelt[name]
            row["file_name"] = name
        row[_caption_key(row)] = captions[name]
        bom = _BOM if i == 0 and body.startswith(_BOM) else b""
        lines[i] = bom + row_line(row) + cr
        found.add(name)
    if append_missing:
        for name in sorted(set(captions) - found):
            row = {"file_name": name, "text": captions[name]}
            lines.append(row_line(row))
    return b"".join(line + b"\n" for line in lines)


def _spelt_rows(lines: list[bytes], captions: dict[str, str], folder: Path) -> dict[str, str]:
    """row name -> image name of each row of `lines` that names no image of `captions` byte for
    byte but is read as one's by the scan's rule (data/row_names.match_rows over the images of
    `folder`: its name composed otherwise, RELIABILITY 2200); a caption set for the image is
    written into that row, not into a second row. Empty (no listing) when every image has its row."""
    from lorastudio.data.row_names import folder_rows

    names = [n[1] for line in lines if (n := _row_name(line.removesuffix(b"\r"))) is not None]
    if set(captions) <= set(names):
        return {}
    by_image = folder_rows({n: n for n in names}, folder)
    return {row: image for image, row in by_image.items() if image in captions and row != image}


def _nfc_names(row: dict[str, object]) -> dict[str, object]:
    """`row` with its file names (file_name, control_file_name, each of control_files) in NFC."""
    out = dict(row)
    for key in ("file_name", *METADATA_CONTROL_KEYS):
        value = out.get(key)
        if isinstance(value, str):
            out[key] = unicodedata.normalize("NFC", value)
        elif isinstance(value, list):
            out[key] = [unicodedata.normalize("NFC", v) if isinstance(v, str) else v for v in value]
    return out


def nfc_metadata(path: Path) -> list[str]:
    """Rewrite the staged metadata.jsonl at `path` (an upload's or an import's, checked by
    read_metadata) with every file name its rows hold (file_name, control_file_name,
    control_files) in Unicode NFC: the form an upload stores its files under
    (data.paths.safe_component). A row naming `café.png` decomposed, as macOS writes names,
    named no file of the dataset, and its image was imported uncaptioned (RELIABILITY 2102).
    The file is left as it is when every name is NFC already. Returns the problems of two rows
    that name one file once normalised (nothing rewritten then). Raises DatasetError as
    read_metadata does, OSError."""
    lines = _read_bounded(path).split(b"\n")
    first: dict[str, tuple[int, str]] = {}  # NFC name -> (line number, the name as written)
    problems: list[str] = []
    changed = False
    for i, line in enumerate(lines):
        body, cr = (line[:-1], b"\r") if line.endswith(b"\r") else (line, b"")
        named = _row_name(body)
        if named is None:
            continue
        row, name = named
        nfc = unicodedata.normalize("NFC", name)
        if nfc in first and first[nfc][1] != name:
            problems.append(
                f"{path.name} line {i + 1}: {name!r} and line {first[nfc][0]}'s {first[nfc][1]!r} name one"
                " file (the same letters, composed and decomposed): keep one row"
            )
        first.setdefault(nfc, (i + 1, name))
        normal = _nfc_names(row)
        if normal != row:
            bom = _BOM if i == 0 and body.startswith(_BOM) else b""
            lines[i] = bom + row_line(normal) + cr
            changed = True
    if changed and not problems:
        path.write_bytes(b"\n".join(lines))
    return problems
