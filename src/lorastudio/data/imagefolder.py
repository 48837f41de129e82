"""A Hugging Face `imagefolder` whose caption table names images in its sub-folders, flattened for
`lorastudio datasets import` (no torch, no HTTP).

HF's imagefolder reads `file_name` relative to the table (`{"file_name": "images/0001.png", ...}`
beside an `images/` folder); a lorastudio dataset is one flat folder whose rows name its own
files. The import took the table as it was and skipped the sub-folder: no image, and rows naming
nothing (RELIABILITY 1006). `flatten_rows` picks each image a row names inside the source (one or
more levels down, no link on the way, no `..`) to be imported under its own name, the row's
file_name rewritten to it; a name another image already takes, a row naming controls (a paired
dataset's: its rows are kept as they are) or a file that is no image stays as it was, listed.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from lorastudio.data.captions import METADATA_CONTROL_KEYS
from lorastudio.data.discovery import is_image_name
from lorastudio.data.metadata_write import row_line


def flatten_rows(
    source: Path, rows: dict[str, dict[str, object]], taken: set[str]
) -> tuple[list[tuple[Path, str]], list[tuple[str, str]], bytes | None]:
    """(images to import as (source file, stored name), skipped (row file_name, why), the new
    metadata.jsonl bytes or None when no row names a sub-folder's image) for the table `rows`
    (file_name -> row, as data.captions.metadata_rows reads them) of the folder `source`
    (resolved); `taken`: the names of the images imported from `source` itself."""
    picked: list[tuple[Path, str]] = []
    skipped: list[tuple[str, str]] = []
    names = set(taken)
    out: list[dict[str, object]] = []
    for file_name, row in rows.items():
        if "/" not in file_name:
            out.append(row)
            continue
        why, path = _nested_image(source, file_name, row)
        base = PurePosixPath(file_name).name
        if why is None and base in names:
            why = f"{base} is already taken by another image of the import"
        if why is not None or path is None:
            skipped.append((file_name, why or "not found"))
            out.append(row)
            continue
        names.add(base)
        picked.append((path, base))
        out.append({**row, "file_name": base})
    if not picked:
        return [], skipped, None
    table = b"".join(row_line(r) + b"\n" for r in out)  # a lone surrogate kept escaped (2221)
    return picked, skipped, table


def _nested_image(source: Path, file_name: str, row: dict[str, object]) -> tuple[str | None, Path | None]:
    """(why the row's sub-folder image is not taken, or None; its path when taken)."""
    if any(k in row for k in METADATA_CONTROL_KEYS):
        return "a paired row (its controls): import the target folder itself", None
    rel = PurePosixPath(file_name)
    if rel.is_absolute() or ".." in rel.parts or not is_image_name(rel.name):
        return "not an image inside the folder", None
    path = source.joinpath(*rel.parts)
    try:
        if path.resolve(strict=True) != path or not path.is_file():
            return "a link or not a regular file (not followed)", None
    except OSError:
        return None, None  # missing: the dataset's scan names the row "not found"
    return None, path
