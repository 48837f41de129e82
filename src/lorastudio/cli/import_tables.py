"""The caption tables and caption files a plain `lorastudio datasets import DIR` brings in (no
torch): a Hugging Face imagefolder's rows (metadata.jsonl, or metadata.csv made into it:
data/metadata_csv.py; rows naming images in sub-folders: data/imagefolder.py) and kohya's
`<stem>.caption` files, stored as the `.txt` a dataset reads (RELIABILITY 1002, 1006)."""

from __future__ import annotations

import os
from pathlib import Path


def table_rows(source: Path, wanted: list[Path], table: bytes | None) -> dict[str, dict[str, object]]:
    """file_name -> row of the caption table an import brings: its metadata.jsonl (none when a
    line is bad: the batch refuses that file as before), else the rows made of its metadata.csv."""
    from lorastudio import json_read
    from lorastudio.data.captions import metadata_rows, read_metadata
    from lorastudio.data.discovery import METADATA_FILE

    if any(p.name == METADATA_FILE for p in wanted):
        path = source / METADATA_FILE
        return {} if read_metadata(path).problems else metadata_rows(path)
    if table is None:
        return {}
    rows = (json_read.loads(line) for line in table.decode("utf-8").splitlines() if line.strip())
    return {str(row["file_name"]): row for row in rows}


def kohya_captions_as_txt(
    wanted: list[Path], skipped: list[str], reasons: dict[str, str]
) -> list[tuple[Path, str]]:
    """(source, stored name) of each kohya `<stem>.caption` (any case) of an incoming image that
    has no .txt: imported as `<stem>.txt`, the caption a dataset reads (a plain import skipped it,
    leaving the image uncaptioned: RELIABILITY 1002). Each is taken out of `skipped`; one beside
    the image's .txt, or a second of one stem, stays skipped with its reason in `reasons`."""
    from lorastudio.data.discovery import is_image_name

    txt = {p.stem for p in wanted if p.name.lower().endswith(".txt")}
    images = {p.stem for p in wanted if is_image_name(p.name)}
    out: list[tuple[Path, str]] = []
    taken: dict[str, str] = {}
    folder = wanted[0].parent if wanted else None
    for name in list(skipped):
        stem, _, ext = name.rpartition(".")
        if ext.lower() != "caption" or stem not in images or folder is None:
            continue
        if stem in txt:
            reasons[name] = f"{stem}.txt is imported instead"
        elif stem in taken:
            reasons[name] = f"{taken[stem]} is imported as {stem}.txt"
        else:
            skipped.remove(name)
            taken[stem] = name
            out.append((folder / name, f"{stem}.txt"))
    return out


def unnamed_files(folder: Path, picked: set[Path]) -> int:
    """How many entries of `folder` (its own level, hidden ones left out) are not in `picked`."""
    try:
        with os.scandir(folder) as it:
            return sum(1 for e in it if not e.name.startswith(".") and folder / e.name not in picked)
    except OSError:
        return 0
