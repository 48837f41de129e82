"""Read a LoRA file's safetensors header before any tensor is loaded (no torch): split out of
lora/header.py, which checks what the header says (its names and shapes as a LoRA).

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON
({"__metadata__": {str: str}, name: {"dtype", "shape", "data_offsets": [begin, end]}, ...}),
then the tensor bytes. `read_header` reads only the length and the header, with a size cap, and
checks what the format promises: JSON object, string metadata, known dtypes, non-negative
shapes whose byte size matches their offsets, offsets that tile the data exactly (what the
safetensors library itself requires), and no name given twice. Hand-written because
safetensors' own reader loads the header whole (up to 100 MB) and reports these cases as one
opaque error; each refusal here names the file and the fact that is wrong (ModelSourceError).
"""

from __future__ import annotations

import json
import os
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lorastudio.errors import ModelSourceError, NotFound

MAX_HEADER_BYTES = 16 * 1024 * 1024  # a LoRA's header (names, shapes, metadata) is KBs to a few MB
NOT_SAFETENSORS = (
    "it is not a safetensors file (its first 8 bytes are not the length of a JSON header that"
    " follows; a .ckpt / .pt / .bin file or a text file?)"
)
MAX_TENSORS = 100_000
MAX_DIMS = 8
DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I16": 2, "U16": 2,
    "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8,
}  # fmt: skip


@dataclass(frozen=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclass(frozen=True)
class LoraHeader:
    """A checked safetensors header: string metadata and each tensor's dtype, shape, offsets."""

    path: Path
    metadata: dict[str, str]
    tensors: dict[str, TensorInfo]


def _bad(path: Path, why: str) -> ModelSourceError:
    return ModelSourceError(f"{path} is not a usable safetensors LoRA: {why}")


def read_header(path: Path, max_bytes: int = MAX_HEADER_BYTES) -> LoraHeader:
    """The checked header of the safetensors file `path`, reading at most 8 + `max_bytes` bytes.
    Raises NotFound (no such file), ModelSourceError (anything the format does not allow)."""
    path = Path(path)
    try:
        # without blocking (a FIFO would hold the caller forever), a regular file only
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError(path)
            if not stat.S_ISREG(info.st_mode):
                raise _bad(path, "it is not a regular file (a pipe, a device or a socket)")
            size = info.st_size
            if size < 8:
                raise _bad(path, f"{size} bytes, too short for a safetensors header")
            (length,) = struct.unpack("<Q", f.read(8))
            if (length > max_bytes or length > size - 8) and f.read(1) != b"{":
                # no length of a JSON header that follows: another format (a .ckpt / .pt pickle, a
                # text file), not a header "larger than allowed" or "past the end of the file"
                raise _bad(path, NOT_SAFETENSORS)
            if length > max_bytes:
                raise _bad(path, f"a header of {length} bytes is larger than the {max_bytes} allowed")
            if length > size - 8:
                raise _bad(path, f"the header length ({length} bytes) runs past the end of the file")
            raw = f.read(length)
    except FileNotFoundError:
        raise NotFound(f"LoRA file not found: {path}") from None
    except IsADirectoryError:
        raise _bad(path, "it is a folder") from None
    except OSError as err:
        raise _bad(path, f"cannot be read ({err.strerror or err})") from None
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
    except _DuplicateKey as dup:
        raise _bad(
            path,
            f"its header names {dup.key[:120]!r} twice (a reader keeps one of the two descriptions without"
            " a word, which one is up to the reader: the file would not read the same everywhere)",
        ) from None
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _bad(path, "its header is not JSON") from None
    if not isinstance(header, dict):
        raise _bad(path, "its header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise _bad(path, "__metadata__ is not an object")
    for key, value in metadata.items():
        if not isinstance(value, str):
            raise _bad(path, f"metadata {key[:80]!r} is a {type(value).__name__}, not a string")
    if len(header) > MAX_TENSORS:
        raise _bad(path, f"{len(header)} tensors, more than the {MAX_TENSORS} allowed")
    tensors = {name: _tensor(path, name, entry) for name, entry in header.items()}
    _check_tiling(path, tensors, size - 8 - length)
    return LoraHeader(path, dict(metadata), tensors)


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """json.loads' object_pairs_hook: the object, or _DuplicateKey for a name given twice (a
    tensor or a metadata key: Python's json keeps the last entry without a word, so a header could
    describe a tensor twice, the checks reading one description and another reader the other)."""
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _tensor(path: Path, name: str, entry: object) -> TensorInfo:
    label = repr(name[:120])
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        raise _bad(path, f"tensor {label} is not described by dtype, shape and data_offsets")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if dtype not in DTYPE_BYTES:
        raise _bad(path, f"tensor {label} has an unknown dtype {str(dtype)[:20]!r}")
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_DIMS
        or not all(type(d) is int and 0 <= d < 2**40 for d in shape)
    ):
        raise _bad(path, f"tensor {label} has an impossible shape {str(shape)[:80]}")
    if not (
        isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int and o >= 0 for o in offsets)
    ):
        raise _bad(path, f"tensor {label} has impossible data_offsets {str(offsets)[:80]}")
    begin, end = offsets
    numel = 1
    for d in shape:
        numel *= d
    if end < begin or end - begin != numel * DTYPE_BYTES[dtype]:
        raise _bad(
            path, f"tensor {label}: offsets {begin}..{end} do not hold a {dtype} tensor of shape {shape}"
        )
    return TensorInfo(dtype, tuple(shape), begin, end)


def _check_tiling(path: Path, tensors: Mapping[str, TensorInfo], data_bytes: int) -> None:
    """The tensors' byte ranges must cover the data exactly, without gaps or overlaps."""
    at = 0
    for info in sorted(tensors.values(), key=lambda t: (t.begin, t.end)):
        if info.begin != at:
            raise _bad(path, f"tensor data overlaps or leaves a gap at byte {at}")
        at = info.end
    if at != data_bytes:
        raise _bad(path, f"the tensors describe {at} bytes of data, the file holds {data_bytes}")
