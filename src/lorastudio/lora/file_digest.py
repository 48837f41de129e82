"""The identity of a LoRA file as generation uses it: the sha256 of its bytes (`lora_digest`),
the one a gallery image records for each LoRA, a request may name (LoraRef.sha256: "exactly the
file of that image") and the generation worker checks the file it applies against (a file
replaced or rewritten between the server's check and the worker's load is refused, never applied
in the checked file's name). Remembered per process while the file's version
(file_version.version_of: device, inode, size, mtime, ctime) stays the same, so a LoRA is read
whole once per version, not once per request. No torch."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

from lorastudio.errors import NotFound
from lorastudio.file_version import FileVersion, version_of

DIGEST_CHUNK = 4 * 2**20  # bytes read at a time
_MEMO_MAX = 4096
_memo: dict[tuple[str, FileVersion], str] = {}
_memo_lock = threading.Lock()


def lora_digest(path: Path | str) -> str:
    """Hex sha256 of every byte of LoRA file `path` (a link is followed: the file it names).
    The hash is taken from one open file, and kept only when the file's version was the same
    before and after the read (a file rewritten while it was read is read again next time).
    Raises NotFound when it cannot be read."""
    path = str(path)
    try:
        with open(path, "rb") as fh:
            before = version_of(os.fstat(fh.fileno()))
            with _memo_lock:
                known = _memo.get((path, before))
            if known is not None:
                return known
            digest = hashlib.sha256()
            while chunk := fh.read(DIGEST_CHUNK):
                digest.update(chunk)
            after = version_of(os.fstat(fh.fileno()))
    except OSError as err:
        raise NotFound(f"cannot read LoRA file {path}: {err.strerror or err}") from None
    value = digest.hexdigest()
    if before == after:
        with _memo_lock:
            if len(_memo) >= _MEMO_MAX:
                _memo.clear()
            _memo[(path, before)] = value
    return value


def changed_problem(path: Path | str, expected: str) -> str | None:
    """Why LoRA file `path` is not the file whose sha256 is `expected` (its bytes changed: a
    retrained run, a file replaced), else None. Raises NotFound when it cannot be read."""
    now = lora_digest(path)
    if now == expected:
        return None
    return f"{path} is not the LoRA file asked for: its sha256 is {now}, not {expected} (it was replaced or rewritten)"
