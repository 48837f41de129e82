"""The preflight's caption counts remembered while their tokenizer files stay the same (torch-free).

Each preflight counted its captions in a fresh child process (jobs/caption_tokens.py: the
folder's files are untrusted, so the server never reads them itself): a Python start, the
`tokenizers` import and the tokenizer's load for every Check of the Train form, even when
nothing but an unrelated field changed (~0.1 CPU s and 0.2-0.5 s of wall time each here). The
answer depends only on the ask (folder, root, tokenizer folder, template, texts) and on the
tokenizer folder's files, so a count is kept under the ask and the identity of every entry of
that folder (`os.stat` following links: device, inode, size, mtime and ctime in ns, file type),
which any write, replacement, added or removed file or retargeted link changes. Only a child's
answer of counts is kept (never a "cannot count": a timeout is the host's load, not the files');
a folder that cannot be listed, or lists more than MAX_ENTRIES entries, is never kept (the child
answers it as before). The listing is `os.scandir` + `os.stat` (no file is opened: a FIFO in the
folder cannot block the server's thread); at most MAX_KEPT answers, the oldest dropped first.
The texts are kept as a sha256 of them (length-prefixed, so no two lists read alike) and the counts
as 4-byte integers: an answer holds ~4 bytes a caption whatever the captions' length, so a dataset
of any size is kept (it was not above 1,000,000 characters of captions: ~25,000 short captions
or ~5,000 long ones started a count child at every preflight; RELIABILITY 2110), within
MAX_KEPT_COUNTS counts in all.

Contract: `lookup(ask)` -> the kept counts of this ask whose folder is unchanged since, or None;
`keep(ask, counts)` remembers them (a no-op where the folder cannot be fingerprinted).
"""

from __future__ import annotations

import hashlib
import os
import threading
from array import array
from collections import OrderedDict
from pathlib import Path
from typing import Any

MAX_ENTRIES = 64  # a tokenizer folder holds ~2-8 files; more: not kept (the listing stays small)
MAX_KEPT = 32  # answers kept (each: its captions' digest and counts)
MAX_KEPT_COUNTS = 4_000_000  # counts kept in all (16 MB); the oldest answers dropped first beyond it

_kept: OrderedDict[tuple[Any, ...], tuple[tuple[Any, ...], array[int]]] = OrderedDict()
_lock = threading.Lock()


def _fingerprint(folder: Path) -> tuple[Any, ...] | None:
    """The identity of `folder` and of each of its entries (links followed), or None where it
    cannot be listed, or lists more than MAX_ENTRIES."""
    try:
        top = os.stat(folder)
        with os.scandir(folder) as listing:
            entries = []
            for entry in listing:
                if len(entries) >= MAX_ENTRIES:
                    return None
                try:
                    st = os.stat(entry.path)  # follows a link: its target's identity
                    entries.append(
                        (
                            entry.name,
                            st.st_dev,
                            st.st_ino,
                            st.st_size,
                            st.st_mtime_ns,
                            st.st_ctime_ns,
                            st.st_mode,
                        )
                    )
                except OSError as err:  # a dangling link: its error is its identity
                    entries.append((entry.name, "unreadable", err.errno))
    except OSError:
        return None
    return (top.st_dev, top.st_ino, top.st_mtime_ns, top.st_ctime_ns, tuple(sorted(entries)))


def _texts_digest(texts: list[str]) -> str:
    """A sha256 of `texts` in order, each length-prefixed (["ab"] and ["a", "b"] differ)."""
    digest = hashlib.sha256(len(texts).to_bytes(8, "big"))
    for text in texts:
        raw = text.encode("utf-8", "surrogatepass")
        digest.update(len(raw).to_bytes(8, "big"))
        digest.update(raw)
    return digest.hexdigest()


def _key(ask: dict[str, Any]) -> tuple[Any, ...]:
    """What an answer is kept under: the ask's folder, root, tokenizer and template, and its texts'
    count and digest (never the texts themselves: their memory)."""
    texts = ask["texts"]
    return (ask["folder"], ask["root"], ask["tokenizer"], ask["template"], len(texts), _texts_digest(texts))


def lookup(ask: dict[str, Any]) -> list[int] | None:
    """The counts kept for `ask` whose tokenizer folder has not changed since, else None."""
    key = _key(ask)
    with _lock:
        kept = _kept.get(key)
    if kept is None:
        return None
    fingerprint, counts = kept
    if _fingerprint(Path(ask["folder"]) / ask["tokenizer"]) != fingerprint:
        return None
    with _lock:
        if key in _kept:
            _kept.move_to_end(key)
    return list(counts)


def keep(ask: dict[str, Any], counts: list[int], fingerprint: tuple[Any, ...] | None) -> None:
    """Remember `counts` for `ask`, counted from the folder `fingerprint` (taken before the child
    read it: a change during the count leaves a fingerprint the next lookup does not match)."""
    if (
        fingerprint is None
        or len(counts) > MAX_KEPT_COUNTS
        or any(not -(1 << 31) <= n < 1 << 31 for n in counts)
    ):
        return
    key = _key(ask)
    with _lock:
        _kept[key] = (fingerprint, array("i", counts))
        _kept.move_to_end(key)
        while len(_kept) > MAX_KEPT or sum(len(c) for _, c in _kept.values()) > MAX_KEPT_COUNTS:
            _kept.popitem(last=False)


def fingerprint_of(ask: dict[str, Any]) -> tuple[Any, ...] | None:
    """The tokenizer folder's fingerprint for `ask` now (None: it is not kept)."""
    return _fingerprint(Path(ask["folder"]) / ask["tokenizer"])


def forget() -> None:
    """Drop every kept answer."""
    with _lock:
        _kept.clear()
