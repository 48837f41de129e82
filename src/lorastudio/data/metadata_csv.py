"""A Hugging Face `imagefolder` metadata.csv read into metadata.jsonl rows (no torch, no HTTP).

HF's imagefolder takes its captions from a `metadata.jsonl` or a `metadata.csv` whose header
names a `file_name` column and the other columns (a caption in `text`, often). A dataset reads
metadata.jsonl only (one caption table that every writer keeps: caption edits, caption jobs,
bulk edits); `lorastudio datasets import DIR` turns a folder's metadata.csv into it, each row
`{"file_name", "text"}` from the `file_name` and `text` (else `caption`) columns, so a dataset
from the Hub trains on its own captions (RELIABILITY 1002).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from lorastudio.data.captions import MAX_METADATA_BYTES, one_newline_form
from lorastudio.data.safe_open import open_in_folder
from lorastudio.errors import DatasetError

_TEXT_COLUMNS = ("text", "caption")  # read_metadata's keys, in its order


def csv_as_jsonl(path: Path) -> bytes:
    """The metadata.jsonl bytes of the HF metadata.csv at `path` (UTF-8, a BOM skipped; opened
    without following a link; at most MAX_METADATA_BYTES): one row per CSV row, in order, its
    caption stripped with Windows line ends as LF. A row with an empty file name or caption is left out;
    other columns are not carried (they are no caption). The rows are checked as an upload's
    metadata.jsonl is, after.

    Raises: DatasetError naming the file: larger than the cap, not UTF-8, no `file_name` column,
    no `text` / `caption` column, not CSV."""
    name = path.name
    with open_in_folder(path) as fh:
        raw = fh.read(MAX_METADATA_BYTES + 1)
    if len(raw) > MAX_METADATA_BYTES:
        raise DatasetError(
            f"{name} is too large", [f"{name}: larger than the {MAX_METADATA_BYTES // 2**20} MB allowed"]
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise DatasetError(
            f"{name} is not UTF-8", [f"{name}: not valid UTF-8 text (byte {err.start}); save it as UTF-8 CSV"]
        ) from None
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = [h.strip() for h in (reader.fieldnames or [])]
        reader.fieldnames = header
        if "file_name" not in header:
            raise DatasetError(
                f"{name} has no file_name column",
                [f"{name}: no file_name column (its header: {', '.join(header) or 'none'})"],
            )
        column = next((c for c in _TEXT_COLUMNS if c in header), None)
        if column is None:
            raise DatasetError(
                f"{name} has no caption column",
                [f"{name}: no text (or caption) column beside file_name (its header: {', '.join(header)})"],
            )
        out = io.BytesIO()
        for row in reader:
            file_name = (row.get("file_name") or "").strip()
            if not file_name:
                continue
            caption = one_newline_form(row.get(column) or "").strip()
            if not caption:  # no caption (as an empty one in metadata.jsonl): the image takes the next source
                continue
            line = json.dumps({"file_name": file_name, "text": caption}, ensure_ascii=False)
            out.write(line.encode("utf-8") + b"\n")
    except csv.Error as err:
        raise DatasetError(f"{name} is not CSV", [f"{name}: not valid CSV ({err})"]) from None
    return out.getvalue()
