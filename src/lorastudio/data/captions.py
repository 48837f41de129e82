"""Captions: sidecar .txt files, metadata.jsonl rows, the default caption and the trigger word.

Precedence for one image (first non-empty wins):
  1. `<stem>.txt` next to the image (UTF-8, stripped; an empty file means "no caption");
  2. the image's row in metadata.jsonl (`{"file_name": "x.png", "text": "..."}`; "caption" is
     accepted instead of "text");
  3. `default_caption` (the instance prompt);
  4. the trigger word alone.
The trigger word is then prepended ("<trigger>, <caption>") unless the caption already starts
with it as a whole word.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lorastudio.errors import DatasetError

CaptionSource = Literal["txt", "metadata", "default", "trigger"]
_TEXT_KEYS = ("text", "caption")


@dataclass(frozen=True)
class MetadataTable:
    """Captions read from metadata.jsonl: file name -> caption (stripped, may be empty)."""

    captions: dict[str, str]
    problems: list[str]  # bad lines, each "metadata.jsonl line N: why"


def _clean(text: str | None) -> str | None:
    """Strip `text`; None when it is None or blank."""
    if text is None:
        return None
    text = text.strip()
    return text or None


def read_sidecar(path: Path) -> str | None:
    """The stripped UTF-8 text of a caption file (a BOM is ignored); None if it is blank.

    Raises: DatasetError (one problem naming the file) if it cannot be read or is not UTF-8.
    """
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise DatasetError(f"cannot read caption file {path.name}", [f"{path.name}: {err}"]) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise DatasetError(
            f"caption file {path.name} is not UTF-8",
            [f"{path.name}: not valid UTF-8 text (byte {err.start}); save it as UTF-8"],
        ) from None
    return _clean(text)


def read_metadata(path: Path) -> MetadataTable:
    """Parse metadata.jsonl: one JSON object per line with "file_name" and "text" or "caption".

    Blank lines are skipped. A file name of the form "./x.png" is read as "x.png". Bad lines
    (invalid JSON, missing or non-string fields, a file listed twice) are collected in
    `problems`, never skipped silently.
    Raises: DatasetError if the file cannot be read or is not UTF-8.
    """
    name = path.name
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as err:
        raise DatasetError(f"cannot read {name}", [f"{name}: {err}"]) from None
    except UnicodeDecodeError:
        raise DatasetError(f"{name} is not UTF-8", [f"{name}: not valid UTF-8 text"]) from None
    captions: dict[str, str] = {}
    problems: list[str] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name} line {lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            problems.append(f"{where}: not valid JSON ({err.msg})")
            continue
        if not isinstance(row, dict):
            problems.append(f"{where}: expected a JSON object")
            continue
        file_name = row.get("file_name")
        if not isinstance(file_name, str) or not file_name.strip():
            problems.append(f'{where}: missing "file_name"')
            continue
        file_name = file_name.strip().removeprefix("./")
        key = next((k for k in _TEXT_KEYS if k in row), None)
        if key is None:
            problems.append(f'{where}: missing "text" (or "caption") for {file_name}')
            continue
        if not isinstance(row[key], str):
            problems.append(f'{where}: "{key}" of {file_name} must be a string')
            continue
        if file_name in captions:
            problems.append(f"{where}: {file_name} is listed more than once")
            continue
        captions[file_name] = row[key].strip()
    return MetadataTable(captions=captions, problems=problems)


def apply_trigger(caption: str, trigger_word: str | None) -> str:
    """Prepend "<trigger>, " unless `caption` already starts with the trigger as a whole word.

    `trigger_word` None or blank leaves the caption unchanged; an empty caption becomes the
    trigger alone.
    """
    trigger = _clean(trigger_word)
    if trigger is None:
        return caption
    if not caption:
        return trigger
    if caption.startswith(trigger):
        rest = caption[len(trigger) :]
        if not rest or not (rest[0].isalnum() or rest[0] == "_"):
            return caption
    return f"{trigger}, {caption}"


def choose_caption(
    sidecar: str | None,
    metadata: str | None,
    default_caption: str | None,
    trigger_word: str | None,
) -> tuple[str, CaptionSource] | None:
    """Pick the caption of one image by precedence and apply the trigger word.

    Takes the candidates already read (None or blank = absent).
    Returns (final caption, source), or None when the image has no caption at all (no sidecar,
    no metadata row, no default caption and no trigger word).
    """
    candidates: tuple[tuple[str | None, CaptionSource], ...] = (
        (sidecar, "txt"),
        (metadata, "metadata"),
        (default_caption, "default"),
    )
    for text, source in candidates:
        cleaned = _clean(text)
        if cleaned is not None:
            return apply_trigger(cleaned, trigger_word), source
    trigger = _clean(trigger_word)
    if trigger is not None:
        return trigger, "trigger"
    return None
