"""What a run's text encoders give for one caption, to check cached text shards against.

A text shard's crc32 guards against damage, not against a shard of other tensor names, dtypes or
shapes (a hand, another tool, a bug of an older writer): read as it is, such a shard crashes the
collate or the denoiser, or trains on something else. A `Signature` says, per tensor name, its
dtype and its dims, None where the encoder's output varies with the caption (the token axis of
Qwen-Image, Z-Image or Krea 2's unpadded features; FLUX.1 and SDXL pad to a fixed length). It is
learnt from the run's own encoders: `PROBE_TEXTS` (an empty and a long caption) are encoded and
a dim that differs between them is variable. The learnt signature is kept in the studio home
(not in the cache folder, which other homes and tools may write), keyed by the text encoders'
fingerprint and the encode's key parts (data/text_keys.text_parts), so later runs check their
shards without loading the encoders when every caption is cached. A shard that does not fit
(`misfit`: a name missing or extra, another dtype or rank, a fixed dim differing, a non-finite
value) is a cache miss: the run re-encodes it (training/inputs/conditioning_disk.py). No torch import
(the preflight, jobs/preflight_cache.py, asks whether a signature is kept).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lorastudio.staged_files import staging_path

if TYPE_CHECKING:
    import torch

# an empty caption and a longer one (within CLIP's 77 tokens): a dim that follows the caption's
# length differs between them
PROBE_TEXTS = (
    "",
    "a detailed photograph of a red fox sitting on a mossy stone in a quiet forest at dawn, soft light",
)

Signature = dict[str, tuple[str, tuple[int | None, ...]]]  # name -> (dtype, dims; None: varies)
Summary = dict[str, tuple[str, tuple[int, ...], bool]]  # one shard's name -> (dtype, shape, finite)


def summarize(tensors: Mapping[str, torch.Tensor]) -> Summary:
    """What `misfit` looks at in one shard's tensors (kept instead of them: a run's RAM holds no
    set-wide tensors)."""
    return {
        name: (
            str(t.dtype).removeprefix("torch."),
            tuple(t.shape),
            not (t.is_floating_point() or t.is_complex()) or bool(t.isfinite().all()),
        )
        for name, t in tensors.items()
    }


def learn_signature(samples: Sequence[Mapping[str, torch.Tensor]]) -> Signature | None:
    """The signature of several encodes of one encoder (PROBE_TEXTS'): each name's dtype and
    dims, None for a dim that differs between them. None when they disagree in names, dtype
    or rank (an encoder whose output no signature describes: its shards are not checked)."""
    names = sorted(samples[0])
    if any(sorted(s) != names for s in samples):
        return None
    out: Signature = {}
    for name in names:
        tensors = [s[name] for s in samples]
        if len({t.dtype for t in tensors}) != 1 or len({t.dim() for t in tensors}) != 1:
            return None
        dims = tuple(
            d if all(t.shape[i] == d for t in tensors) else None for i, d in enumerate(tensors[0].shape)
        )
        out[name] = (str(tensors[0].dtype).removeprefix("torch."), dims)
    return out


def misfit(summary: Summary, signature: Signature) -> str | None:
    """Why one text shard (its `summarize`) is not what the run's encoder gives, or None when it
    fits: the same names, each of the signature's dtype and rank, its fixed dims, finite."""
    if sorted(summary) != sorted(signature):
        return f"tensors {sorted(summary)}, the encoder gives {sorted(signature)}"
    for name, (dtype, dims) in signature.items():
        got, shape, finite = summary[name]
        if got != dtype:
            return f"{name} is {got}, the encoder gives {dtype}"
        if len(shape) != len(dims) or any(d is not None and shape[i] != d for i, d in enumerate(dims)):
            want = ", ".join("n" if d is None else str(d) for d in dims)
            return f"{name} has shape {list(shape)}, the encoder gives [{want}]"
        if not finite:
            return f"{name} holds a non-finite value"
    return None


def signature_path(folder: Path, model: str, parts: Mapping[str, Any]) -> Path:
    """Where the signature of text encoders `model` encoding with `parts` is kept in `folder`."""
    digest = hashlib.sha256(json.dumps(dict(parts), sort_keys=True).encode()).hexdigest()[:16]
    return folder / f"{model}-{digest}.json"


MAX_RECORD_BYTES = 1 << 20  # a signature is a few hundred bytes


def read_signature(path: Path) -> Signature | None:
    """The signature kept at `path`, or None when missing or not one: not a regular file (a
    FIFO, which a plain open would wait on for ever, a device, a folder), over
    MAX_RECORD_BYTES, not JSON, wrong types."""
    from lorastudio.basemodels.jsonfile import read_json

    try:
        raw = read_json(path, MAX_RECORD_BYTES)  # opened without blocking, bounded
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict):
        return None
    out: Signature = {}
    for name, entry in raw.items():
        if not (
            isinstance(entry, list)
            and len(entry) == 2
            and isinstance(entry[0], str)
            and isinstance(entry[1], list)
            and all(d is None or (type(d) is int and d >= 0) for d in entry[1])
        ):
            return None
        out[name] = (entry[0], tuple(entry[1]))
    return out or None


def write_signature(path: Path, signature: Signature) -> None:
    """Keep `signature` at `path` (staged, then renamed). A write that fails is skipped: the next
    run learns it again."""
    staged = staging_path(path)  # staged_files.py: a killed writer's is removed at a server start
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staged.write_text(json.dumps({k: [d, list(s)] for k, (d, s) in signature.items()}), encoding="utf-8")
        os.replace(staged, path)
    except OSError:
        staged.unlink(missing_ok=True)
