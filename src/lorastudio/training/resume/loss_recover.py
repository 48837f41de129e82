"""The losses an older version's checkpoint lacks, found again in the run folder (RELIABILITY 1440).

An older version of lorastudio (before RELIABILITY 1340) that resumed one of our checkpoints read
only its window (state.pt's newest WINDOW losses): the checkpoints it wrote then hold that window
and its own steps, and the steps before the window were listed as NaN on our next resume. They
are still in the run folder's losses.bin, which that version never touched: `recover` finds them
where a checkpoint of ours still names them (its loss_record, CRC-checked), or else at the file's
start (a run this version trained in one session writes its steps 1..n there, in order). Either
way they are taken only when the values that follow them are bitwise the older checkpoint's own
first ones (the window it carried over): never another run's or session's losses.
"""

from __future__ import annotations

import pickle
from array import array
from pathlib import Path

from lorastudio.training.resume.checkpoint import STATE_FILE, checkpoint_step, list_checkpoints
from lorastudio.training.resume.loss_record import RECORD_KEY, from_bytes, open_losses, read_span, to_bytes
from lorastudio.training.resume.run_files import LOSSES_FILE

_ITEM = 8  # bytes of one float64


def recover(run_dir: Path, missing: int, window: array) -> array | None:
    """The losses of steps 1..`missing` of the run at `run_dir` whose steps missing+1.. begin with
    `window` (an older version's checkpoint's list), or None when neither a checkpoint of ours
    nor the start of losses.bin holds them followed by `window`'s first values."""
    if missing <= 0 or not window:
        return None
    head = to_bytes(window)
    for checkpoint in reversed(list_checkpoints(run_dir)):
        if (checkpoint_step(checkpoint) or 0) <= missing:
            continue  # names no step past `missing`: nothing to check its values against
        found = _from_checkpoint(run_dir, checkpoint, missing, head)
        if found is not None:
            return found
    return _from_file_start(run_dir / LOSSES_FILE, missing, head)


def _from_checkpoint(run_dir: Path, checkpoint: Path, missing: int, head: bytes) -> array | None:
    """Steps 1..missing from `checkpoint`'s loss_record when it names more than `missing` steps
    and those after step `missing` are `head`'s first ones."""
    import torch

    try:
        state = torch.load(checkpoint / STATE_FILE, map_location="cpu", weights_only=True, mmap=True)
    except (OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError):
        return None  # not readable: another checkpoint, or the file's start, may hold them
    entry = state.get(RECORD_KEY) if isinstance(state, dict) else None
    count = entry.get("count") if isinstance(entry, dict) else None
    if type(count) is not int or count <= missing:
        return None
    try:
        values, _, _ = read_span(run_dir / LOSSES_FILE, entry, count)
    except (OSError, ValueError):
        return None
    overlap = min(count - missing, len(head) // _ITEM)
    if to_bytes(values[missing : missing + overlap]) != head[: overlap * _ITEM]:
        return None
    return values[:missing]


def _from_file_start(path: Path, missing: int, head: bytes) -> array | None:
    """Steps 1..missing from the start of `path` when the values after them there are `head`
    (as many as the file holds, at least one)."""
    try:
        with open_losses(path) as file:  # no link, no FIFO
            data = file.read(missing * _ITEM + len(head))
    except OSError:
        return None
    after = data[missing * _ITEM :]
    if len(after) < _ITEM or len(after) % _ITEM or after != head[: len(after)]:
        return None
    return from_bytes(data[: missing * _ITEM])
