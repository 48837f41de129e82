"""One consistent LoRA + sidecar pair of a run, held for a push (no torch; RELIABILITY 2042).

A run writes its pair by renaming a staged sidecar into place, then the LoRA
(training/export.write_lora_pair), and a resume or an extension of the run does so again while a
push may be uploading: a push that read the sidecar, then uploaded the LoRA by its path, could
send the resumed LoRA with the sidecar (and model card) of the run before it. `pair_snapshot`
opens the LoRA first and keeps that descriptor (a rename over the path leaves the opened file as
it was: the upload reads it, never the path again), then reads the sidecar and checks that the
two are one write's: the LoRA header's `lorastudio.steps`, `lorastudio.total_steps` and
`lorastudio.created_at` are what the sidecar's own `steps`, `total_steps` and `created_at` say
(as lora/metadata.training_metadata writes them). Read between the two renames they differ: it
tries again (PAIR_TRIES, PAIR_PAUSE_S apart), then refuses with
JobActive naming both. Nothing is copied: the held descriptor is the snapshot.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from lorastudio import json_read
from lorastudio.errors import JobActive, NotFound
from lorastudio.lora.metadata import PREFIX

PAIR_KEYS = ("steps", "total_steps", "created_at")  # one write's facts in both files
PAIR_TRIES = 5
PAIR_PAUSE_S = 0.2  # the two renames of a write are microseconds apart
_MAX_HEADER = 16 * 1024 * 1024


def _header_metadata(fh: BinaryIO) -> dict[str, Any]:
    """The `__metadata__` of the safetensors file open as `fh` ({} when it has none or cannot be
    read as one: the push uploads it as it is, and the LoRA's own checks name what is wrong)."""
    fh.seek(0)
    head = fh.read(8)
    if len(head) < 8:
        return {}
    (length,) = struct.unpack("<Q", head)
    if length > _MAX_HEADER:
        return {}
    try:
        meta = json_read.loads(fh.read(length).decode("utf-8")).get("__metadata__")
    except (ValueError, AttributeError):
        return {}
    finally:
        fh.seek(0)
    return meta if isinstance(meta, dict) else {}


def _fact(value: Any) -> str:
    """A sidecar value as the header holds it (lora/metadata.training_metadata's `_text`)."""
    return "" if value is None else str(value)


def pair_mismatch(header: dict[str, Any], sidecar: dict[str, Any]) -> str | None:
    """What differs between a LoRA header's metadata and a sidecar that should be one write's
    ("steps 4 in the LoRA, 6 in the sidecar"), None when nothing both record differs."""
    for key in PAIR_KEYS:  # the sidecar's own top-level facts, as training_metadata writes them
        # into the header; not training_metadata(sidecar) itself, which raised AttributeError for
        # a sidecar whose "config" or "dataset" is no object (null), a traceback where the push
        # before 2042 went on (RELIABILITY 2223)
        ours, theirs = header.get(PREFIX + key), _fact(sidecar.get(key))
        if ours and theirs and ours != theirs:
            return f"{key} {ours} in the LoRA, {theirs} in the sidecar"
    return None


@contextmanager
def pair_snapshot(lora: Path, sidecar_path: Path) -> Iterator[tuple[BinaryIO, dict[str, Any]]]:
    """(the LoRA open for reading, its sidecar parsed) of one write of the run, held while the
    caller uploads them. Raises NotFound (the LoRA gone, the sidecar unreadable) and JobActive
    (the two stayed of different writes over PAIR_TRIES reads: a run is rewriting them)."""
    why = ""
    for attempt in range(PAIR_TRIES):
        if attempt:
            time.sleep(PAIR_PAUSE_S)
        try:
            fd = os.open(lora, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError as err:
            raise NotFound(f"no LoRA at {lora} ({err.strerror or err})") from None
        fh = os.fdopen(fd, "rb")
        try:
            try:
                sidecar = json_read.loads(sidecar_path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as err:
                raise NotFound(
                    f"{sidecar_path} cannot be read ({err}); the push needs the LoRA's sidecar"
                ) from None
            if not isinstance(sidecar, dict):
                raise NotFound(f"{sidecar_path} is not a JSON object; the push needs the LoRA's sidecar")
            mismatch = pair_mismatch(_header_metadata(fh), sidecar)
            if mismatch is None:
                yield fh, sidecar
                return
            why = mismatch
        finally:
            fh.close()
    raise JobActive(
        f"{lora.name} and {sidecar_path.name} are not one write's ({why}) after {PAIR_TRIES} reads: "
        "a run (a resume or an extension) is rewriting them; push when it ends, as the pushed pair "
        "would not match"
    )
