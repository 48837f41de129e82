"""The keys of the on-disk text embedding cache (training/inputs/conditioning_disk.py writes and reads
the shards; the preflight counts those already there). No torch: the job service imports it.

A caption's shard is keyed by the family, the text encoders' and tokenizers' content fingerprint
(`text_fingerprint`), the dtype and device kind of the encode, max_sequence_length and the
caption's sha256 (data/disk_cache.shard_key over `text_parts`' dict and the text's hash).
"""

from __future__ import annotations

import hashlib
from typing import Any

from lorastudio.data.disk_cache import component_fingerprint, shard_key

KIND = "text"
TEXT_COMPONENTS = (
    "text_encoder",
    "text_encoder_2",
    "text_encoder_3",
    "tokenizer",
    "tokenizer_2",
    "tokenizer_3",
)
# the preflight's dtype names -> torch's (the encode's key part is torch's name without "torch.")
TORCH_DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def text_fingerprint(source: Any, revision: str | None) -> str:
    """The content fingerprint of a base's text encoders and tokenizers: those it has by their
    files, those it lacks by a fixed marker (fingerprint rule 3: before it, by the base's name,
    so a copy, a moved home or the hub id of the same files encoded every caption once more)."""
    parts = [component_fingerprint(source, name, revision) for name in TEXT_COMPONENTS]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def text_parts(
    family: str, model: str, dtype: str, device: str, max_sequence_length: int | None
) -> dict[str, Any]:
    """The key parts every caption of one encode shares. `dtype`: torch's name ("float32",
    "bfloat16"...); `device`: the device kind ("cpu", "cuda")."""
    return {
        "family": family,
        "encoders": model,
        "dtype": dtype,
        "device": device,
        "max_sequence_length": max_sequence_length,
    }


def text_key(parts: dict[str, Any], text: str) -> str:
    """The shard key of caption `text` encoded with `parts`."""
    return shard_key({**parts, "text": hashlib.sha256(text.encode()).hexdigest()})
