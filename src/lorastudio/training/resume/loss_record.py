"""A run's per-step losses, kept beside the run in its folder's `losses.bin` (run_files.LOSSES_FILE)
instead of whole in every checkpoint (RELIABILITY 1340: each state.pt held every loss so far, O(step)
a checkpoint: 90 MB at 10,000,000 steps).

The file: little-endian float64 values, appended in segments. A session writes its losses at each
checkpoint (`flush`, before the checkpoint's folder is renamed into place) to the end of its own
segment, which begins at the file's end as the session first found it (8-byte aligned): it never
writes over bytes an existing checkpoint reads, so a checkpoint kept from before a resume of an
older one stays whole, and a discarded resume puts the file back as it found it (`discard`).
A checkpoint's state.pt names its losses as `loss_record` = {"count": S, "spans": [[byte offset,
values], ...] in step order, "crc32": zlib.crc32 of those bytes}, plus "losses": the last WINDOW
values (what an older version of lorastudio resumes with, and what a resume keeps when the file
does not hold the checkpoint's losses). A checkpoint an older version wrote holds every loss in
"losses": it resumes as before, and its losses join this session's segment at the next flush
(one it wrote after resuming a checkpoint of ours holds our window and its steps: the steps
before are read back from losses.bin where it still holds them, training/resume/loss_recover.py, else
NaN, and a RunWarning says so).

The file is opened without following a link and never blocks (a FIFO there is refused); a file
removed, cut or replaced since this session's last write gets every step again at its end, and a
discard leaves a file this session did not write as it is (RELIABILITY 1540, 1548).

Why by hand: numpy.memmap or a sqlite table would do the same appends with more to explain; a
resume reads the spans once (8 bytes a step: 0.8 MB at 100,000 steps).
"""

from __future__ import annotations

import errno
import math
import os
import stat
import sys
import zlib
from array import array
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.training.resume.folder_guard import check_folder
from lorastudio.training.resume.losses_file import losses_file_problem
from lorastudio.training.resume.run_files import LOSSES_FILE

RECORD_KEY = "loss_record"  # state.pt's entry naming the checkpoint's losses in LOSSES_FILE
WINDOW = 1000  # the newest losses state.pt keeps itself (8 KB)
_ITEM = 8  # bytes of one float64


def to_bytes(values: array) -> bytes:
    """`values` (array 'd') as little-endian float64 bytes."""
    if sys.byteorder == "little":
        return values.tobytes()
    swapped = array("d", values)
    swapped.byteswap()
    return swapped.tobytes()


def from_bytes(data: bytes) -> array:
    """Little-endian float64 bytes as an array 'd'."""
    values = array("d")
    values.frombytes(data)
    if sys.byteorder != "little":
        values.byteswap()
    return values


class LossRecord:
    """The losses of a run's steps 1..len, in memory (8 bytes a step), and what of them the run
    folder's LOSSES_FILE holds. `append(loss)` per step; `flush(run_dir)` (rank 0, at a checkpoint)
    writes the losses not in the file yet and returns state.pt's RECORD_KEY entry; `restore` puts a
    checkpoint's losses back; `discard` undoes this session's writes (a resume stopped without save)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.values = array("d")
        self._spans: list[list[int]] = []  # [offset, count] of the flushed steps, in step order
        self._crc = 0  # zlib.crc32 of the flushed steps' bytes, in step order
        self._flushed = 0  # steps 1.._flushed are in the file, at _spans
        self._end: int | None = None  # where this session's next write goes in the file
        self._found: int | None = None  # the file's size when this session first wrote it (-1: none)
        self._run_dir: Path | None = None
        self._file: tuple[int, int] | None = None  # (st_dev, st_ino) of the file this session wrote

    def append(self, loss: float) -> None:
        self.values.append(loss)

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[float]:
        return iter(self.values)

    def window(self) -> list[float]:
        """The newest WINDOW losses (state.pt's "losses")."""
        return list(self.values[-WINDOW:])

    def flush(self, run_dir: Path) -> dict[str, Any]:
        """Write the losses not in `run_dir`'s LOSSES_FILE yet at the end of this session's segment
        (fsynced) and return the RECORD_KEY entry of a checkpoint of every step so far. An OSError of
        the write passes (the checkpoint's writer names it); the record is then as before."""
        path = run_dir / LOSSES_FILE
        check_folder(run_dir)  # not a folder put at the run's path since it started (folder_guard.py)
        existed = os.path.lexists(path)
        fd = _open(path, os.O_RDWR | os.O_CREAT)
        try:
            st = os.fstat(fd)
            size, file = st.st_size, (st.st_dev, st.st_ino)
            if self._found is None:  # what `discard` puts back
                self._found, self._run_dir = (size if existed else -1), run_dir
            if self._end is not None and (size < self._end or file != self._file):
                # removed, cut or replaced since this session's last write (RELIABILITY 1548): the
                # spans would name bytes it no longer holds; every step goes again at its end
                self._spans, self._crc, self._flushed, self._end = [], 0, 0, None
            self._file = file
            start = self._end if self._end is not None else -(-size // _ITEM) * _ITEM
            spans = [list(s) for s in self._spans]
            if not spans or spans[-1][0] + spans[-1][1] * _ITEM != start:
                spans.append([start, 0])  # else the last span goes on (this session's, or the one resumed)
            data = to_bytes(self.values[self._flushed :])
            view = memoryview(data)
            offset = start
            while view:
                written = os.pwrite(fd, view, offset)
                view, offset = view[written:], offset + written
            os.fsync(fd)
        finally:
            os.close(fd)
        self._end = start + len(data)
        spans[-1][1] += len(self.values) - self._flushed
        self._spans, self._crc, self._flushed = spans, zlib.crc32(data, self._crc), len(self.values)
        return {"count": self._flushed, "spans": [list(s) for s in spans], "crc32": self._crc}

    def restore(self, run_dir: Path, step: int, state: Mapping[str, Any]) -> str | None:
        """Put back the losses of steps 1..`step` of a checkpoint of `run_dir` whose state.pt is
        `state`. Returns None, or a note (a RunWarning's) when LOSSES_FILE does not hold them as the
        checkpoint recorded (missing, shorter, another file's): the steps before state.pt's window
        are then NaN, and the next flush writes them all again. Raises ConfigError (field "resume")
        where LOSSES_FILE is a link or not a regular file, or it or the run folder cannot be written
        (training/resume/losses_file.py)."""
        why = losses_file_problem(run_dir)  # refused now, not at the first checkpoint's append
        if why is not None:
            raise ConfigError([FieldProblem("resume", why)])
        window = [float(x) for x in state["losses"]]
        entry = state.get(RECORD_KEY)
        self._reset()
        if entry is None:  # an older version's checkpoint: every loss in state.pt
            missing = max(0, step - len(window))  # that version resumed one of ours: its window only
            kept = array("d", window[len(window) - (step - missing) :])
            if not missing:
                self.values = kept
                return None
            from lorastudio.training.resume.loss_recover import recover  # it reads this module's file format

            found = recover(run_dir, missing, kept)  # still in losses.bin (RELIABILITY 1440)
            self.values = (found if found is not None else array("d", [math.nan] * missing)) + kept
            if found is not None:
                return None
            return (
                f"the losses of steps 1-{missing} are not in the checkpoint nor in {LOSSES_FILE} (an older version of lorastudio "
                "resumed this run from a checkpoint that kept its newest losses only): the run's result lists "
                "them as NaN (its metrics keep them)"
            )
        path = run_dir / LOSSES_FILE
        try:
            values, spans, crc = read_span(path, entry, step)
        except (OSError, ValueError) as err:
            known = window[-step:] if step else []
            self.values = array("d", [math.nan] * (step - len(known)) + known)
            if len(known) == step:  # the window holds every step: nothing lost (the next flush rewrites them)
                return None
            return (
                f"the losses of steps 1-{step - len(known)} are not in {path} as the checkpoint recorded "
                f"({err}): the run's result lists them as NaN (its metrics keep them)"
            )
        self.values, self._spans, self._crc, self._flushed = values, spans, crc, step
        return None

    def discard(self) -> None:
        """Put LOSSES_FILE back at the size this session found it (nothing of it written over:
        only appended past it), or remove it where there was none. Nothing written: nothing done;
        a file that is not the one this session wrote (replaced since) is left as it is."""
        if self._run_dir is None or self._found is None:
            return
        path = self._run_dir / LOSSES_FILE
        check_folder(self._run_dir)
        found, self._found, self._run_dir = self._found, None, None
        try:
            fd = _open(path, os.O_RDWR)
        except FileNotFoundError:
            return  # removed since: nothing of this session's left to take back
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != self._file:
                return  # replaced since: not the file this session wrote
            if found < 0:
                path.unlink()
            elif st.st_size > found:
                os.ftruncate(fd, found)
                os.fsync(fd)
        finally:
            os.close(fd)


def read_span(path: Path, entry: Any, step: int) -> tuple[array, list[list[int]], int]:
    """The losses `entry` (state.pt's RECORD_KEY) names in `path`, with its spans and CRC. Raises
    ValueError when the entry is malformed, counts other than `step` steps, or the bytes read
    differ from the ones it recorded (short, or another file); OSError when the file cannot be read."""
    spans = entry.get("spans") if isinstance(entry, Mapping) else None
    if (
        not isinstance(spans, list)
        or not all(
            isinstance(s, list) and len(s) == 2 and all(type(v) is int and v >= 0 for v in s) for s in spans
        )
        or sum(s[1] for s in spans) != step
        or entry.get("count") != step
    ):
        raise ValueError(f"state.pt's {RECORD_KEY} does not name {step} steps")
    data = bytearray()
    with open_losses(path) as file:
        for offset, count in spans:
            file.seek(offset)
            chunk = file.read(count * _ITEM)
            if len(chunk) != count * _ITEM:
                raise ValueError(f"{path.name} is shorter than the checkpoint's losses")
            data += chunk
    crc = zlib.crc32(data)
    if crc != entry.get("crc32"):
        raise ValueError(f"{path.name} holds other losses than the checkpoint's")
    return from_bytes(bytes(data)), [list(s) for s in spans], crc


def open_losses(path: Path) -> BinaryIO:
    """`path` (a run folder's LOSSES_FILE) open for reading. Raises OSError when it is a symbolic
    link (flush never writes through one either) or not a regular file: a FIFO put there would
    block the resume's open forever (RELIABILITY 1540)."""
    return os.fdopen(_open(path, os.O_RDONLY), "rb")


def _open(path: Path, flags: int) -> int:
    """A descriptor of the regular file `path` (created 0o666 & umask with O_CREAT in `flags`),
    never through a symbolic link nor blocking on a FIFO. Raises OSError naming `path`."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise OSError(
                errno.ELOOP, "a symbolic link, which lorastudio does not follow in a run folder", str(path)
            ) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return fd
