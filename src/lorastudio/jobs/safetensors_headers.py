"""The tensors a base's safetensors file lists (its JSON header), read once per file version per
process and shared by every reader of them: the VRAM estimate (jobs/vram_estimate.py), the
host-memory estimate's converted bytes, and the wall-time forecast's cost model
(jobs/time_work.py). No torch.

A header near the cap (MAX_HEADER_BYTES, ~10^6 tensors) costs ~3.5 s and ~1.4 GB to parse; each
preflight read it several times (the cost model once, the VRAM estimate's readers each time).
Now one parse per file version (file_version.version_of: a rewrite in place is seen), kept as a
compact tuple of `Tensor`s; the memo holds at most MAX_CACHED_TENSORS tensors in all (least
recently used dropped first; a header larger than that is parsed and not kept).
"""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from pathlib import Path
from typing import NamedTuple

from lorastudio import json_read
from lorastudio.file_version import FileVersion, version_of

MAX_HEADER_BYTES = 100_000_000  # a header past this is not read (safetensors' own cap)
MAX_CACHED_TENSORS = 1_200_000  # tensors kept in the memo in all (~250 B each): one capped header fits


class Tensor(NamedTuple):
    """One tensor of a header: its name, stored dtype (None when the header gives none), bytes
    (end - begin of its data_offsets; 0 when they are not two whole numbers) and shape (None
    when it is not a list of at most 8 whole numbers >= 0: what safetensors writes)."""

    name: str
    dtype: str | None
    nbytes: int
    shape: tuple[int, ...] | None


_memo: OrderedDict[tuple[str, FileVersion], tuple[Tensor, ...]] = OrderedDict()
_memo_tensors = 0
_lock = threading.Lock()
parses = 0  # headers parsed by this process (tests count them)


def header_tensors(file: Path) -> tuple[Tensor, ...]:
    """The tensors of safetensors `file`'s header (no "__metadata__"; () when it cannot be read
    or is not a JSON object), from the memo when this version of the file was read before."""
    global _memo_tensors
    try:
        key = (str(file), version_of(file.stat()))
    except OSError:
        return ()
    with _lock:
        found = _memo.get(key)
        if found is not None:
            _memo.move_to_end(key)
            return found
    tensors = _parse(file)
    if len(tensors) <= MAX_CACHED_TENSORS:
        with _lock:
            if key not in _memo:
                _memo[key] = tensors
                _memo_tensors += len(tensors)
            while _memo_tensors > MAX_CACHED_TENSORS:
                _, dropped = _memo.popitem(last=False)
                _memo_tensors -= len(dropped)
    return tensors


def _parse(file: Path) -> tuple[Tensor, ...]:
    global parses
    try:
        with file.open("rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json_read.loads(fh.read(min(size, MAX_HEADER_BYTES)))
    except (OSError, ValueError, struct.error):
        return ()
    finally:
        parses += 1
    if not isinstance(header, dict):
        return ()
    dtypes: dict[str, str] = {}  # one str object per dtype name
    out = []
    for name, meta in header.items():
        if name == "__metadata__" or not isinstance(meta, dict):
            continue
        dtype = meta.get("dtype")
        dtype = dtypes.setdefault(dtype, dtype) if isinstance(dtype, str) else None
        out.append(
            Tensor(name, dtype, _nbytes(meta.get("data_offsets", (0, 0))), _shape(meta.get("shape", [])))
        )
    return tuple(out)


def _nbytes(offsets: object) -> int:
    if isinstance(offsets, (list, tuple)) and len(offsets) == 2 and all(_whole(v) for v in offsets):
        return int(offsets[1]) - int(offsets[0])
    return 0


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shape(shape: object) -> tuple[int, ...] | None:
    ok = isinstance(shape, list) and len(shape) <= 8 and all(_whole(d) and 0 <= d < 2**63 for d in shape)
    return tuple(shape) if ok else None  # type: ignore[arg-type]


def clear() -> None:
    """Forget every header (tests)."""
    global _memo_tensors
    with _lock:
        _memo.clear()
        _memo_tensors = 0
