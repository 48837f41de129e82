"""Where the decoded-images record of a dataset folder (data/decoded.py) and its journal
(data/decoded_journal.py) live, and how a delete or a rename of the folder takes both with it.
No torch, no HTTP."""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

from lorastudio.data import decoded_journal
from lorastudio.data.safe_open import FolderId


def record_name(folder: Path, folder_id: FolderId) -> str:
    """The file stem of the record of dataset folder `folder` (absolute) of identity `folder_id`."""
    ident = f"{folder}\n{folder_id[0]}:{folder_id[1]}".encode("utf-8", "surrogateescape")
    return hashlib.sha256(ident).hexdigest()[:32]


def forget_record(record_dir: Path, folder: Path, folder_id: FolderId) -> None:
    """Remove the record of the dataset folder `folder` (`folder_id`: its identity before it
    was deleted). A deleted folder's record is never read again (a folder made again under the
    name is another inode, so another record): kept, the cache grew by a file for every dataset
    ever deleted. Its journal goes first (a journal is never made by an append, so none comes
    back). No record: nothing done."""
    record = record_dir / f"{record_name(Path(os.path.abspath(folder)), folder_id)}.json"
    for path in (decoded_journal.journal_path(record), record):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def move_record(record_dir: Path, old: Path, new: Path, folder_id: FolderId) -> None:
    """Carry the record of the dataset folder `old`, renamed to `new` (the same folder,
    `folder_id`), over to `new`: its entries are names relative to the folder, and renaming a
    folder changes none of its files' keys. Its journal goes with it. No record: nothing done."""
    source = record_dir / f"{record_name(Path(os.path.abspath(old)), folder_id)}.json"
    target = record_dir / f"{record_name(Path(os.path.abspath(new)), folder_id)}.json"
    for src, dst in (
        (source, target),
        (decoded_journal.journal_path(source), decoded_journal.journal_path(target)),
    ):
        with contextlib.suppress(FileNotFoundError):
            os.replace(src, dst)
