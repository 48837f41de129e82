"""The SAI model spec's `modelspec.hash_sha256` of a LoRA file: "a hash of all tensor content
(ie excluding the header section), with 0x prefix" (github.com/Stability-AI/ModelSpec): the
sha256 of every byte after the safetensors header. lora/files.write_lora_file, the writer of
every LoRA file (a run's export, convert, merge, resize), writes the header with a placeholder
of the hash's length (lora/metadata.HASH_PLACEHOLDER, from modelspec_metadata), then puts the
hash over it in place: the data region does not depend on the header, so nothing moves and the
tensors are read once. No torch."""

from __future__ import annotations

import hashlib
from pathlib import Path

from lorastudio.errors import ModelSourceError
from lorastudio.lora.metadata import HASH_KEY, HASH_PLACEHOLDER

HASH_CHUNK = 4 * 2**20  # bytes read at a time while hashing a file's tensor data


def record_content_hash(path: Path) -> str:
    """Put the SAI model spec's hash_sha256 into the header of the .safetensors file `path`,
    whose header holds HASH_PLACEHOLDER once: "0x" + the sha256 of every byte after the header
    (the tensor data), written over the placeholder in place (the same length: nothing moves).
    Returns the hash. Raises ModelSourceError when the header holds no single placeholder."""
    digest = hashlib.sha256()
    with open(path, "r+b") as fh:
        size = int.from_bytes(fh.read(8), "little")
        header = fh.read(size)
        at = header.find(HASH_PLACEHOLDER.encode())
        if at < 0 or header.find(HASH_PLACEHOLDER.encode(), at + 1) >= 0:
            raise ModelSourceError(f"{path}: the header holds no single {HASH_KEY} placeholder")
        while chunk := fh.read(HASH_CHUNK):
            digest.update(chunk)
        value = "0x" + digest.hexdigest()
        fh.seek(8 + at)
        fh.write(value.encode())
    return value
