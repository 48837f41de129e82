"""Captions: sidecar .txt files, metadata.jsonl rows, the default caption and the trigger word.

Precedence for one image (first non-empty wins):
  1. `<stem>.txt` next to the image (UTF-8, stripped; an empty file means "no caption"; CR LF
     and CR line ends read as LF, from either source: `one_newline_form`);
  2. the image's row in metadata.jsonl (`{"file_name": "x.png", "text": "..."}`; "caption" is
     accepted instead of "text");
  3. `default_caption` (the instance prompt);
  4. the trigger word alone.
The trigger word is then prepended ("<trigger>, <caption>") unless the caption already starts
with it as a whole word, compared in NFC (a caption saved in NFD, as macOS names spell "café",
starts with the trigger typed in NFC: RELIABILITY 1030); a "[trigger]" in the caption is replaced
by it instead (a caption with "[trigger]" and no trigger word is a problem the scan reports).

Both sources are read bounded and without following links (`data.safe_open`): a caption is at
most MAX_CAPTION_BYTES (UTF-8) wherever it comes from, a metadata.jsonl line at most
MAX_METADATA_LINE_BYTES (room for JSON escapes) and the file at most MAX_METADATA_BYTES; a
caption or line over its cap is a problem naming the file and line, never read whole.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

from lorastudio import json_read
from lorastudio.data.paths import nfc
from lorastudio.data.safe_open import FolderId, open_in_folder
from lorastudio.errors import DatasetError

CaptionSource = Literal["txt", "metadata", "default", "trigger"]
TRIGGER_PLACEHOLDER = "[trigger]"  # replaced by the run's (or the dataset entry's) trigger word
_TEXT_KEYS = ("text", "caption")
# a paired dataset's row keys naming a target's controls (data/pairs.py): a row with them and no
# text names controls only, the caption then comes from elsewhere (a .txt, the trigger word...)
METADATA_CONTROL_KEYS = ("control_file_name", "control_files")
MAX_CAPTION_BYTES = 64 * 1024
MAX_METADATA_LINE_BYTES = 8 * MAX_CAPTION_BYTES  # a capped caption JSON-escaped, with its file name
MAX_METADATA_BYTES = 64 * 2**20
_SKIP_PIECE = 2**16
_SIDECAR_SLACK = 1024  # a BOM and surrounding blank lines around a capped caption
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_UTF32_BOMS = (
    b"\xff\xfe\x00\x00",
    b"\x00\x00\xfe\xff",
)  # read as UTF-16 they were "UTF-16 without its mark?"


@dataclass(frozen=True)
class MetadataTable:
    """Captions read from metadata.jsonl: file name -> caption (stripped, may be empty)."""

    captions: dict[str, str]
    problems: list[str]  # bad lines, each "metadata.jsonl line N: why"
    control_rows: frozenset[str] = frozenset()  # files whose row names controls only (no caption)


def _clean(text: str | None) -> str | None:
    """Strip `text`; None when it is None or blank."""
    if text is None:
        return None
    text = text.strip()
    return text or None


def one_newline_form(text: str) -> str:
    """`text` with its Windows (CR LF) and classic Mac (CR) line ends as LF: a caption saved on
    Windows is the caption saved elsewhere, as an editor, the web's text box and a prompt field
    (which refuses CR: text_rules) show it; else a multi-line caption trained with CRs that no
    prompt can hold (byte-level tokenizers give CR LF tokens of its own)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def read_sidecar(path: Path, folder_id: FolderId | None = None) -> str | None:
    """The stripped text of a caption file: UTF-8 (a BOM is ignored), or UTF-16 that starts with
    its byte order mark; None if it is blank. Line ends are LF (`one_newline_form`).

    Raises: DatasetError (one problem naming the file) if it cannot be read, is a link, is
    larger than MAX_CAPTION_BYTES, is not UTF-8 (nor marked UTF-16) or holds a NUL.
    """
    too_long = DatasetError(
        f"caption file {path.name} is too long",
        [f"{path.name}: caption larger than {MAX_CAPTION_BYTES // 1024} KB (shorten it)"],
    )
    with open_in_folder(path, folder_id) as fh:
        try:
            raw = fh.read(MAX_CAPTION_BYTES + _SIDECAR_SLACK + 1)
        except OSError as err:
            raise DatasetError(f"cannot read caption file {path.name}", [f"{path.name}: {err}"]) from None
    if len(raw) > MAX_CAPTION_BYTES + _SIDECAR_SLACK:
        raise too_long
    if raw.startswith(_UTF32_BOMS):  # before UTF-16's: FF FE 00 00 starts with FF FE
        raise DatasetError(
            f"caption file {path.name} is UTF-32",
            [f"{path.name}: UTF-32 text (by its byte order mark), which is not read; save it as UTF-8"],
        )
    utf16 = raw.startswith(_UTF16_BOMS)  # Windows Notepad's "Unicode": unambiguous with its mark
    try:
        text = raw.decode("utf-16" if utf16 else "utf-8-sig")
    except UnicodeDecodeError as err:
        kind = "UTF-16" if utf16 else "UTF-8"
        raise DatasetError(
            f"caption file {path.name} is not {kind}",
            [f"{path.name}: not valid {kind} text (byte {err.start}); save it as UTF-8"],
        ) from None
    text = one_newline_form(
        text.lstrip("\ufeff")
    )  # a second mark (a tool that added its own before the file's)
    if "\0" in text:  # UTF-16 without its mark decodes as "UTF-8" with a NUL every other byte
        raise DatasetError(
            f"caption file {path.name} is not UTF-8",
            [
                f"{path.name}: not valid UTF-8 text (NUL at byte {raw.index(0)}: UTF-16 without its "
                "byte order mark?); save it as UTF-8"
            ],
        )
    cleaned = _clean(text)
    if cleaned and len(cleaned.encode("utf-8")) > MAX_CAPTION_BYTES:
        raise too_long
    return cleaned


def caption_problem(text: str) -> str | None:
    """Why caption `text` cannot be stored so that every reader takes it back as written (None:
    it can): larger than MAX_CAPTION_BYTES, or holding a NUL (read_sidecar and read_metadata
    refuse it: the dataset's scan would then refuse the file), or holding another trainer's markup
    that the scan refuses (unread_markup: "{trigger}", kohya's "|||"). Every writer of a caption
    checks it before writing (data/image_edits.write_caption, data/caption_bulk)."""
    if len(text.encode("utf-8")) > MAX_CAPTION_BYTES:
        return f"caption larger than {MAX_CAPTION_BYTES // 1024} KB"
    if "\0" in text:
        return "the caption holds a NUL character"
    if (markup := unread_markup(text)) is not None:
        return f"the caption {markup}"
    return None


def _lines(fh: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes without the newline) of each line; None for a line longer than
    MAX_METADATA_LINE_BYTES, which is skipped in bounded pieces, never held."""
    lineno = 0
    while True:
        line = fh.readline(MAX_METADATA_LINE_BYTES + 1)
        if not line:
            return
        lineno += 1
        if len(line) > MAX_METADATA_LINE_BYTES and not line.endswith(b"\n"):
            while (piece := fh.readline(_SKIP_PIECE)) and not piece.endswith(b"\n"):
                pass
            yield lineno, None
            continue
        yield lineno, line.rstrip(b"\r\n")


_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(text: str) -> str | None:
    """The first lone surrogate of `text` as JSON escapes it ("\\ud83d"), None where it holds
    none: a JSON string may escape one (a caption cut inside an emoji's UTF-16 pair), which is no
    character and has no UTF-8 (encoding the caption raised UnicodeEncodeError)."""
    found = None if text.isascii() else _SURROGATE.search(text)
    return None if found is None else f"\\u{ord(found.group()):04x}"


def _row_caption(line: bytes, where: str) -> tuple[str, str | None] | str:
    """(file name, stripped caption) of one metadata.jsonl line, or the problem with it; the
    caption is None for a row naming only controls (METADATA_CONTROL_KEYS, no text key)."""
    try:
        row = json_read.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        return f"{where}: not valid UTF-8 text"
    except json.JSONDecodeError as err:
        return f"{where}: not valid JSON ({err.msg})"
    if not isinstance(row, dict):
        return f"{where}: expected a JSON object"
    file_name = row.get("file_name")
    if not isinstance(file_name, str) or not file_name.strip():
        return f'{where}: missing "file_name"'
    file_name = file_name.strip().removeprefix("./")
    key = next((k for k in _TEXT_KEYS if k in row), None)
    if key is None and any(k in row for k in METADATA_CONTROL_KEYS):
        return file_name, None  # its controls only (data/pairs.py reads and checks them)
    if key is None:
        return f'{where}: missing "text" (or "caption") for {file_name}'
    if not isinstance(row[key], str):
        return f'{where}: "{key}" of {file_name} must be a string'
    caption = one_newline_form(row[key]).strip()
    if "\0" in caption:
        return f'{where}: "{key}" of {file_name} holds a NUL character'
    if lone := _lone_surrogate(caption):  # JSON's "\ud83d" escape: no character, no UTF-8 (2220)
        return f'{where}: "{key}" of {file_name} holds {lone}, half of a UTF-16 pair that names no character'
    if len(caption.encode("utf-8")) > MAX_CAPTION_BYTES:
        return f"{where}: caption of {file_name} larger than {MAX_CAPTION_BYTES // 1024} KB (shorten it)"
    return file_name, caption


MAX_LISTED_LINE_PROBLEMS = 50  # metadata.jsonl's bad lines listed one by one; the rest counted


def read_metadata(path: Path, folder_id: FolderId | None = None) -> MetadataTable:
    """Parse metadata.jsonl: one JSON object per line with "file_name" and "text" or "caption"
    (or, naming only a paired target's controls, "control_file_name" / "control_files": no
    caption from it).

    Blank lines are skipped. A file name of the form "./x.png" is read as "x.png". Bad lines
    (invalid JSON or UTF-8, missing or non-string fields, a file listed twice, a line over
    MAX_METADATA_LINE_BYTES, a caption over MAX_CAPTION_BYTES) are collected in `problems`
    ("metadata.jsonl line N: why"), never skipped silently: the first MAX_LISTED_LINE_PROBLEMS,
    then one line counting the rest (a file of 70,000 bad lines is one readable answer).
    Raises: DatasetError if the file cannot be read, is a link or is larger than
    MAX_METADATA_BYTES.
    """
    name = path.name
    captions: dict[str, str] = {}
    control_rows: set[str] = set()  # rows naming controls only: no caption
    problems: list[str] = []
    with open_in_folder(path, folder_id) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > MAX_METADATA_BYTES:
            raise DatasetError(
                f"{name} is too large",
                [f"{name}: {size:,} bytes, larger than the {MAX_METADATA_BYTES // 2**20} MB allowed"],
            )
        try:
            for lineno, line in _lines(fh):
                where = f"{name} line {lineno}"
                if line is None:
                    problems.append(f"{where}: longer than {MAX_METADATA_LINE_BYTES // 1024} KB")
                    continue
                if lineno == 1:
                    line = line.removeprefix(b"\xef\xbb\xbf")
                if not line.strip():
                    continue
                row = _row_caption(line, where)
                if isinstance(row, str):
                    problems.append(row)
                elif row[0] in captions or row[0] in control_rows:
                    problems.append(f"{where}: {row[0]} is listed more than once")
                elif row[1] is None:
                    control_rows.add(row[0])
                else:
                    captions[row[0]] = row[1]
        except OSError as err:
            raise DatasetError(f"cannot read {name}", [f"{name}: {err}"]) from None
    if len(problems) > MAX_LISTED_LINE_PROBLEMS:
        rest = len(problems) - MAX_LISTED_LINE_PROBLEMS
        problems = [*problems[:MAX_LISTED_LINE_PROBLEMS], f"{name}: and {rest:,} more bad lines"]
    return MetadataTable(captions=captions, problems=problems, control_rows=frozenset(control_rows))


def metadata_rows(path: Path) -> dict[str, dict[str, object]]:
    """file_name -> the whole row (caption, controls and any other keys) of each good line of
    metadata.jsonl at `path`, read with read_metadata's bounds; the uploads' merge keeps rows
    whole with it. Lines read_metadata reports as bad are left out. Raises DatasetError as
    read_metadata does."""
    good = read_metadata(path)  # the bounds and checks (a link, the size caps)
    named = {*good.captions, *good.control_rows}
    rows: dict[str, dict[str, object]] = {}
    with open_in_folder(path, None) as fh:
        for _, line in _lines(fh):
            try:
                row = json_read.loads(line.removeprefix(b"\xef\xbb\xbf").decode("utf-8")) if line else None
            except (UnicodeDecodeError, json.JSONDecodeError):
                continue
            name = row.get("file_name") if isinstance(row, dict) else None
            if isinstance(name, str) and (key := name.strip().removeprefix("./")) in named:
                rows.setdefault(key, {**row, "file_name": key})
    return rows


# other trainers' or templates' spellings of a trigger placeholder ({trigger}, <trigger>,
# [TRIGGER], {{trigger_word}} ...): not replaced, they would train as text (RELIABILITY 1733)
_PLACEHOLDER_LIKE = re.compile(r"[\[{<]{1,2}\s*trigger(?:[ _]?word)?\s*[\]}>]{1,2}", re.IGNORECASE)


KOHYA_KEEP_SEPARATOR = "|||"  # sd-scripts' keep_tokens_separator as its guides spell it


def unread_markup(caption: str) -> str | None:
    """Why `caption` holds markup of another trainer that would train as text, or None: a
    trigger placeholder spelt otherwise than TRIGGER_PLACEHOLDER ("{trigger}", "<trigger>",
    "[Trigger]", "{{trigger_word}}" ...: apply_trigger does not replace it), or kohya's
    keep_tokens_separator "|||" (the tags before it kept in front by kohya's shuffle; not read
    here). Words "the caption ..." completes (RELIABILITY 1733)."""
    for match in _PLACEHOLDER_LIKE.finditer(caption):
        if match.group() != TRIGGER_PLACEHOLDER:
            return (
                f"holds {match.group()}, which is not replaced: the trigger word's place is written "
                f"{TRIGGER_PLACEHOLDER}"
            )
    if KOHYA_KEEP_SEPARATOR in caption:
        return (
            f"holds {KOHYA_KEEP_SEPARATOR}, kohya's keep_tokens_separator, which is not read (it would train "
            "as text): put the tags to keep first and set keep_tokens to their count"
        )
    return None


def overridden_row(image: str, caption_file: str) -> str:
    """Why `image`'s metadata.jsonl row is not read, its caption file `caption_file` holding
    another text (the precedence above): the reason the scan and the dataset listing give it
    under `dropped` (RELIABILITY 1731)."""
    return (
        f"the row of {image} only: {caption_file} holds another caption, and a caption file wins over "
        "metadata.jsonl (delete one of the two)"
    )


def apply_trigger(caption: str, trigger_word: str | None) -> str:
    """Prepend "<trigger>, " unless `caption` already starts with the trigger as a whole word;
    a caption holding the TRIGGER_PLACEHOLDER "[trigger]" gets the word there instead.

    `trigger_word` None or blank leaves the caption unchanged; an empty caption becomes the
    trigger alone.
    """
    trigger = _clean(trigger_word)
    if trigger is None:
        return caption
    if TRIGGER_PLACEHOLDER in caption:  # the caption says where the trigger word goes
        return caption.replace(TRIGGER_PLACEHOLDER, trigger)
    if not caption:
        return trigger
    start, word = nfc(caption), nfc(trigger)  # one spelling of "é" each (RELIABILITY 1030)
    if start.startswith(word):
        rest = start[len(word) :]
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
    for text, source in candidates:  # a blank .txt falls through to the row (own_caption)
        cleaned = _clean(text)
        if cleaned is not None:
            return apply_trigger(cleaned, trigger_word), source
    trigger = _clean(trigger_word)
    if trigger is not None:
        return trigger, "trigger"
    return None


def own_caption(sidecar: str | None, row: str | None) -> str | None:
    """An image's own caption as a run's scan takes it (`choose_caption`'s first two sources,
    before a default caption and the trigger word): its .txt's text unless blank, else its
    metadata.jsonl row's unless blank; None for neither. The text as given (not stripped).

    A blank .txt is no caption (choose_caption): the row beside it trains. The dataset's
    listing, detail, bulk edit and an edit's conflict check read an image's caption through
    this, so what they show and edit is the caption the run trains (RELIABILITY 2070)."""
    for text in (sidecar, row):
        if _clean(text) is not None:
            return text
    return None
