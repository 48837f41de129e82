"""The on-disk encode cache's shards (one safetensors file per latent variant or caption, with
its crc32 in the metadata): written staged and renamed, read whole and checked, no link followed
(data/cache_io.py). Shared by the latent cache (training/inputs/latents_disk.py) and the text cache
(training/inputs/conditioning_disk.py)."""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from lorastudio import json_read
from lorastudio.data.cache_io import read_shard_bytes, write_shard_bytes


def _crc(tensors: dict[str, torch.Tensor]) -> str:
    """crc32 over the tensors' bytes, in name order (any dtype: bf16 and bool too)."""
    crc = 0
    for name in sorted(tensors):
        flat = tensors[name].contiguous().reshape(-1)
        crc = zlib.crc32(flat.view(torch.uint8).numpy() if flat.numel() else b"", crc)
    return f"{crc:08x}"


def write_shard(
    path: Path,
    tensors: dict[str, torch.Tensor],
    metadata: Mapping[str, str] | None = None,
    problems: list[str] | None = None,
) -> bool:
    """Write `tensors` (CPU, fp32) to shard `path` (data/cache_io.write_shard_bytes: staged,
    renamed, no link followed; another writer of the same key writes the same bytes), with
    `metadata` (strings, e.g. a caption's token count) beside its crc32.
    Returns False when the disk refused it (its path and reason appended to `problems`)."""
    from safetensors.torch import save

    data = save(tensors, metadata={**(metadata or {}), "crc32": _crc(tensors)})
    return write_shard_bytes(path, data, problems)


def _metadata(data: bytes) -> dict[str, Any]:
    """The __metadata__ of safetensors bytes ({} when absent or unreadable): safetensors' bytes
    loader drops it and its safe_open wants a path (which would follow a planted link)."""
    size = int.from_bytes(data[:8], "little")
    if len(data) < 8 or size > len(data) - 8:
        return {}
    try:
        header = json_read.loads(data[8 : 8 + size])
    except (ValueError, UnicodeDecodeError):
        return {}
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    return meta if isinstance(meta, dict) else {}


def read_shard(
    path: Path,
    shape: tuple[int, ...] | None = None,
    required: tuple[str, ...] = ("mean", "std"),
    shapes: dict[str, tuple[int, ...]] | None = None,
) -> dict[str, torch.Tensor] | None:
    """A shard's tensors, or None when it is missing, not a regular file under real folders
    (data/cache_io.read_shard_bytes), truncated, unreadable, fails its crc32, holds no tensor,
    lacks a `required` tensor, or (with `shape`: a latent shard) its mean or std is not
    `shape`, float32 and finite, or a tensor named in `shapes` is missing, of another shape or
    not float32."""
    found = read_shard_entry(path, shape, required, shapes)
    return found[0] if found is not None else None


def read_shard_entry(
    path: Path,
    shape: tuple[int, ...] | None = None,
    required: tuple[str, ...] = ("mean", "std"),
    shapes: dict[str, tuple[int, ...]] | None = None,
) -> tuple[dict[str, torch.Tensor], dict[str, Any]] | None:
    """`read_shard`'s tensors with the shard's metadata (write_shard's `metadata` and its crc32),
    or None where read_shard gives None."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    data = read_shard_bytes(path)
    if data is None:
        return None
    try:
        tensors = load(data)
    except (SafetensorError, RuntimeError, ValueError, OverflowError):
        return None
    metadata = _metadata(data)
    if not tensors or any(name not in tensors for name in required) or metadata.get("crc32") != _crc(tensors):
        return None
    if shape is not None and not all(
        tuple(tensors[n].shape) == shape
        and tensors[n].dtype == torch.float32
        and bool(tensors[n].isfinite().all())
        for n in ("mean", "std")
    ):
        return None
    if any(
        name not in tensors or tuple(tensors[name].shape) != s or tensors[name].dtype != torch.float32
        for name, s in (shapes or {}).items()
    ):
        return None
    return tensors, metadata
