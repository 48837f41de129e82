"""Which image each metadata.jsonl caption row names (no torch, no HTTP): the one rule the run's
scan (data/scan.py), the Datasets listing (data/listing.py), the dataset's page
(data/dataset_detail.py) and the caption tools read rows by, so that what the list counts as
captioned is what a run trains with that caption.

A row names its image byte for byte. A row whose name matches no file so but matches exactly one
file once both are composed (Unicode NFC: a folder copied from macOS holds its names decomposed,
NFD, e + U+0301, where a row written elsewhere is composed, or the other way round) is that
file's row, said in a note naming both spellings (RELIABILITY 2200): an older lorastudio's upload
stored such a row beside the file it had stored composed, and its caption is what the user meant.
A row stays unmatched (named by the scan as "listed in metadata.jsonl but not found", and refused
where its image has no caption of its own: data/peer_files.unread_caption_problems) when two
files compose to its name, when the file it composes to has a row of its own spelt byte for byte,
or when two rows compose to one file: never one of two picked.
"""

from __future__ import annotations

import os
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class RowMatch(Generic[T]):
    """The rows of a table matched to a folder's image names (`match_rows`)."""

    by_file: dict[str, T] = field(default_factory=dict)  # image name -> its row's value
    spelt: dict[str, str] = field(default_factory=dict)  # image name -> the row's other spelling
    unmatched: list[str] = field(default_factory=list)  # rows naming no image (in the table's order)


def match_rows(rows: Mapping[str, T], names: Iterable[str]) -> RowMatch[T]:
    """Match the rows `rows` (a row's file name as written -> its value) to the image names
    `names` by the module's rule: byte for byte, else the one file and the one row that compose
    (NFC) alike. Costs one pass over each; nothing is normalised for a table whose rows all
    match byte for byte."""
    files = set(names)
    out: RowMatch[T] = RowMatch()
    loose: list[str] = []
    for name, value in rows.items():
        if name in files:
            out.by_file[name] = value
        else:
            loose.append(name)
    if not loose:
        return out
    composed: dict[str, list[str]] = defaultdict(list)
    for name in files:
        composed[unicodedata.normalize("NFC", name)].append(name)
    claims: dict[str, list[str]] = defaultdict(list)  # composed name -> the loose rows composing to it
    for name in loose:
        claims[unicodedata.normalize("NFC", name)].append(name)
    for name in loose:
        key = unicodedata.normalize("NFC", name)
        found = composed.get(key, [])
        if len(found) == 1 and len(claims[key]) == 1 and found[0] not in out.by_file:
            out.by_file[found[0]] = rows[name]
            out.spelt[found[0]] = name
        else:
            out.unmatched.append(name)
    return out


def spelt_row_note(row: str, image: str) -> str:
    """The note (a `dropped` reason of metadata.jsonl, as scan and listing give it) saying that the
    row `row` is read as `image`'s, its accents composed otherwise (the code points tell the two
    spellings apart: they look alike)."""
    return (
        f"the row {ascii(row)} is read as {image}'s: its name {SPELT} {ascii(image)} (a folder from macOS; "
        "write the row's file_name as the file's name to silence this)"
    )


SPELT = "composes its accents otherwise than the file's"  # the words of spelt_row_note's note


def spelt_resume_note(dropped: Iterable[tuple[str, str]]) -> str:
    """The words a resume's refusal of a changed dataset adds when its scan read rows spelt
    otherwise (`dropped`: the scan's, holding spelt_row_note's notes): a lorastudio before
    RELIABILITY 2200 read no such row (the image trained on the trigger word or default caption,
    or, since 2105, the run was refused), so a checkpoint it wrote trained those images without
    the row's caption, which this scan gives them; "" when there is none. The fingerprint decides:
    the run cannot continue on other captions than it trained."""
    rows = [why.split(" is read as ", 1)[0].removeprefix("the row ") for _, why in dropped if SPELT in why]
    if not rows:
        return ""
    return (
        f" (metadata.jsonl row(s) {', '.join(rows)} name their image with its accents composed otherwise, which "
        "a lorastudio before session 40 read as naming no file: a checkpoint it wrote trained those images on "
        "the trigger word or default caption, and this version gives them the row's caption (RELIABILITY "
        "2200); to resume as it was, delete those rows from metadata.jsonl (the images then train as the "
        "checkpoint trained them), or start a new run to train their captions)"
    )


def folder_rows(captions: Mapping[str, T], folder: Path) -> dict[str, T]:
    """`captions` (a metadata.jsonl's rows: file name as written -> value) keyed by the image of
    `folder` each names (`match_rows` over the folder's image names, as the run's scan matches
    them), for a reader that has not listed the folder; a folder that cannot be listed: as written."""
    from lorastudio.data.discovery import is_image_name

    try:
        names = [n for n in os.listdir(folder) if is_image_name(n)]
    except OSError:
        return dict(captions)
    return match_rows(captions, names).by_file


def image_keyed(rows: Mapping[str, T], names: Iterable[str]) -> dict[str, T]:
    """`rows` with each row that `match_rows` reads as an image's under another spelling keyed by
    that image's name, the others (byte for byte, or naming no image: the caller names those) as
    written: the pairing's control rows (data/pairs.py, pair_listing.py)."""
    match = match_rows(rows, names)
    return {**{name: rows[name] for name in match.unmatched}, **match.by_file}


def spelt_file(path: Path) -> Path | None:
    """The one image of `path`'s folder that a row's path `path` (naming no file byte for byte:
    a control's) names by `match_rows`' rule, its accents composed otherwise; None for none, two,
    or a folder that cannot be listed."""
    try:
        names = [n for n in os.listdir(path.parent) if n != path.name]
    except OSError:
        return None
    found = match_rows({path.name: None}, names).spelt
    return path.parent / next(iter(found)) if found else None
