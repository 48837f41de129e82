"""The append journal beside a decoded-images record (data/decoded.py): what a save changed,
one line per save, so that an upload batch into a dataset of 25,000 images writes its own 32
rows, not the whole record again (RELIABILITY 2210).

`<key>.journal` sits beside `<key>.json` in the record folder (settings.decoded_record_dir). Its
first line is its header, {"journal": JOURNAL_VERSION, "rules": DECODE_RULES}; each later line
one save's changes, {"drop": [names], "set": {name: row}} (a row as the record's: 7 ints), each
line ended by a newline. A line is appended with O_APPEND (one write; a journal is never made by
an append: a missing one is written whole, staged and renamed, by `write_fresh`), so lines of
two processes do not interleave on a local file system. The record is a cache and each row a
fact about one file version (decoded.DecodedRecord.known compares it with the file's own key):
a row read twice, late, or over a record another process wrote meanwhile is never a wrong
verdict; a lost one only costs a decode again. So:
- a torn line (a writer killed mid-append: no newline yet) is ignored, and the next append
  starts a new line first (`append_line`), so it costs only its own rows;
- a line that is not JSON of that form, or a row that is not 7 ints of the record's bounds,
  is ignored (read row by row, as the record is);
- a journal of another JOURNAL_VERSION or rules (a newer or older lorastudio), or over
  decoded.RECORD_MAX_BYTES, is not read at all, and the next save writes the record whole and
  a fresh journal (`compact_due` says when: also once the journal outgrows half the record,
  so a load reads a bounded journal and a save's amortised cost stays the batch's own).
A lorastudio before the journal reads the record alone (the journal's rows are decoded again)
and its save rewrites the record without touching the journal, whose rows stay true facts.
No torch, no HTTP.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lorastudio import json_read
from lorastudio.capped_read import read_capped
from lorastudio.data.images import DECODE_RULES
from lorastudio.data.safe_open import open_in_folder
from lorastudio.errors import DatasetError
from lorastudio.staged_files import staging_path

JOURNAL_VERSION = 1
SUFFIX = ".journal"
COMPACT_MIN_BYTES = 256 << 10  # a journal smaller than this is never compacted (~2,500 rows)

JournalId = tuple[int, int]  # (device, inode) of a journal file


def journal_path(record_path: Path) -> Path:
    """The journal of the record file `record_path` (`<key>.json` -> `<key>.journal`)."""
    return record_path.with_suffix(SUFFIX)


def header() -> bytes:
    """A fresh journal's first line."""
    return (
        json.dumps({"journal": JOURNAL_VERSION, "rules": DECODE_RULES}, separators=(",", ":")) + "\n"
    ).encode()


def compact_due(journal_bytes: int, record_bytes: int) -> bool:
    """Whether a journal of `journal_bytes` beside a record of `record_bytes` should be folded
    into the record: past COMPACT_MIN_BYTES and half the record's size."""
    return journal_bytes > max(COMPACT_MIN_BYTES, record_bytes // 2)


def journal_id(path: Path) -> tuple[JournalId, int] | None:
    """((device, inode), size) of the regular file `path` (no link followed); None otherwise."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return ((st.st_dev, st.st_ino), st.st_size) if stat.S_ISREG(st.st_mode) else None


def read_lines(path: Path, start: int, max_bytes: int) -> tuple[list[dict[str, Any]], int] | None:
    """The change lines of journal `path` from byte `start` (0: its header is checked first) and
    the offset after its last complete line; None when it cannot be read, is not a regular file,
    is over `max_bytes`, or its header is not this version's and rules' (a newer or older
    lorastudio's). A torn or garbled line is left out."""
    try:
        with open_in_folder(path) as fh:
            fh.seek(start)
            data = read_capped(fh, max_bytes + 1 - start)
    except (DatasetError, OSError, ValueError):
        return None
    if start + len(data) > max_bytes:
        return None
    end = data.rfind(b"\n") + 1  # past the last complete line; a torn tail waits (or stays torn)
    lines = data[:end].split(b"\n")[:-1]
    if start == 0:
        if not lines or _parse(lines[0]) != {"journal": JOURNAL_VERSION, "rules": DECODE_RULES}:
            return None
        lines = lines[1:]
    changes = [c for c in map(_parse, lines) if isinstance(c, dict) and "journal" not in c]
    return changes, start + end


def _parse(line: bytes) -> Any:
    try:
        return json_read.loads(line.decode("utf-8"))
    except (ValueError, RecursionError):  # torn, garbled, not UTF-8
        return None


def apply(files: dict[str, Any], changes: list[dict[str, Any]], entry: Callable[[object], Any]) -> None:
    """Apply journal `changes` to the record's entries `files` in order: each line's drops, then
    its rows (`entry`: decoded._entry, None for a row of any other form: left out)."""
    for change in changes:
        drop, rows = change.get("drop"), change.get("set")
        if isinstance(drop, list):
            for name in drop:
                if isinstance(name, str):
                    files.pop(name, None)
        if isinstance(rows, dict):
            for name, row in rows.items():
                parsed = entry(row)
                if parsed is not None:
                    files[name] = parsed


def change_line(drop: list[str], rows: dict[str, list[int]]) -> bytes:
    """One save's journal line (newline-ended)."""
    return (json.dumps({"drop": drop, "set": rows}, separators=(",", ":")) + "\n").encode("utf-8")


def append_line(path: Path, line: bytes) -> tuple[JournalId, int, int]:
    """Append `line` to the existing journal `path` in one write, after a newline first when
    its last line is torn; returns its (device, inode), its size before and after. Raises
    FileNotFoundError when there is none (the caller writes it whole: `write_fresh`), OSError
    when it cannot be written, and DatasetError when it is not a regular file."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise DatasetError(f"{path} is not a regular file")
        if st.st_size and os.pread(fd, 1, st.st_size - 1) != b"\n":
            line = b"\n" + line  # a killed writer's torn line stays one line of its own
        done = 0
        while done < len(line):
            done += os.write(fd, line[done:])
        return (st.st_dev, st.st_ino), st.st_size, os.fstat(fd).st_size
    finally:
        os.close(fd)


def write_fresh(path: Path) -> tuple[JournalId, int]:
    """Replace journal `path` by one of its header alone (staged and renamed); returns its
    (device, inode) and size. Raises OSError when it cannot be written (nothing left staged)."""
    tmp = staging_path(path)  # staged_files.py: a killed writer's is removed at a server start
    try:
        tmp.write_bytes(header())
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    found = journal_id(path)
    if found is None:
        raise OSError(f"the journal {path} went away as it was written")
    return found
