"""The decoded-images records (data/decoded.py) of dataset folders that are gone, swept at a
server start. No torch, no HTTP.

The studio's own deletes and renames take a folder's record with them (fix 711,
decoded_files.forget_record / move_record); a folder removed or renamed by hand left its record in
`cache/decoded/` for ever (up to 64 MB each), never read again. `orphan_records` lists them; a
record is one only when it is certainly of a removed folder, never of one on a drive that is not
mounted now:
- its folder (the record's `folder`) does not exist (a mount point of its own left empty by an
  unmount still exists: kept), and
- the folder's parent, the dataset root, does exist and is a folder (a drive not mounted under
  /mnt/usb leaves no /mnt/usb/datasets: kept), and
- that root is the file system the folder was on: its device is the record's `device` (a root
  that is itself a mount point, not mounted now, is another device: kept). A record written
  before the device was saved is one only when the root holds a dataset folder or file that is
  not hidden (an unmounted mount point is empty).
Only a record's head (the fields before `files`) is read, so a start reads a few KB per dataset
folder ever seen, whatever their size. A record is a cache: sweeping one wrongly costs decodes.
A swept record's journal (`<key>.journal`: data/decoded_journal.py) goes with it, and so does a
journal whose record is gone (removed by a lorastudio before the journal: RELIABILITY 2210).
"""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path
from typing import Any

from lorastudio.data.decoded_journal import SUFFIX, journal_path
from lorastudio.data.safe_open import open_in_folder
from lorastudio.errors import DatasetError

log = logging.getLogger("lorastudio.jobs")

HEAD_BYTES = (
    64 * 1024
)  # a record's fields before "files": its folder path (4 KB at most) and a few short ones


def record_head(path: Path) -> dict[str, Any] | None:
    """The fields of record file `path` before its `files` (what decoded.DecodedRecord.save
    writes first: version, rules, folder, device), read from its first HEAD_BYTES only; None
    when it cannot be read or is not of that form (a link, a FIFO: safe_open)."""
    try:
        with open_in_folder(path) as fh:
            text = fh.read(HEAD_BYTES).decode("utf-8", "replace")
    except (DatasetError, OSError):
        return None
    decoder = json.JSONDecoder()
    head: dict[str, Any] = {}
    try:
        if not text.startswith("{"):
            return None
        at = 1
        while True:
            key, at = decoder.raw_decode(text, at)
            if not isinstance(key, str) or text[at] != ":":
                return None
            if key == "files":
                return head
            head[key], at = decoder.raw_decode(text, at + 1)
            if text[at] != ",":
                return head
            at += 1
    except (ValueError, IndexError, RecursionError):  # cut at HEAD_BYTES, damaged
        return head if head else None


def orphan_records(record_dir: Path) -> list[Path]:
    """The record files in `record_dir` whose dataset folder is certainly gone (the module's
    rules), then the journals whose record is gone; a record that cannot be read, or whose
    folder cannot be told, is kept."""
    try:
        listed = [e for e in os.scandir(record_dir) if not e.name.startswith(".")]
    except OSError:
        return []
    entries = [e for e in listed if e.name.endswith(".json")]
    names = {e.name for e in entries}
    found: list[Path] = []
    for entry in sorted(entries, key=lambda e: e.name):
        if not entry.is_file(follow_symlinks=False):
            continue
        head = record_head(Path(entry.path)) or {}
        folder = head.get("folder")
        if isinstance(folder, str) and os.path.isabs(folder) and _gone(Path(folder), head.get("device")):
            found.append(Path(entry.path))
    journals = (e for e in listed if e.name.endswith(SUFFIX) and e.is_file(follow_symlinks=False))
    found += sorted(Path(e.path) for e in journals if e.name[: -len(SUFFIX)] + ".json" not in names)
    return found


def _gone(folder: Path, device: object) -> bool:
    """Whether dataset folder `folder` was removed from a dataset root that is mounted now."""
    try:
        os.lstat(folder)
        return False  # there (or something at its path): not gone
    except FileNotFoundError:
        pass
    except OSError:  # ENOTDIR, EACCES, ELOOP: cannot be told
        return False
    try:
        root = os.stat(folder.parent)
    except OSError:
        return False  # the root itself is missing: a drive not mounted
    if not stat.S_ISDIR(root.st_mode):
        return False
    if type(device) is int:
        return root.st_dev == device
    try:
        with os.scandir(folder.parent) as it:
            return any(not e.name.startswith(".") for e in it)
    except OSError:
        return False


def remove_orphan_records(paths: list[Path]) -> int:
    """Remove the records (each with its journal) and journals `orphan_records` listed, each
    logged; one gone meanwhile or that cannot be removed is skipped. Returns how many were
    removed."""
    removed = 0
    for path in paths:
        try:
            if path.suffix == ".json":
                journal_path(path).unlink(missing_ok=True)
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as err:
            log.warning("could not remove the decoded-images record %s of a folder gone: %s", path, err)
            continue
        removed += 1
        why = "its dataset folder is gone" if path.suffix == ".json" else "a journal whose record is gone"
        log.warning("removed the decoded-images record %s: %s", path, why)
    return removed
