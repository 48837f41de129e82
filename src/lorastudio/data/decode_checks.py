"""A check loop's images checked on the process's decode threads, answers in the loop's order.

A scan meets its files one kind at a time (a folder's targets: data/scan.py, their control
images: data/pairs.py, their loss masks: data/masks.py) and checks each (`check_images`): a
file its folder's decoded record (data/decoded.py) knows as it is now is not opened; the others
are probed (images.probe_pixels), each fully decoded when the record wants it (its first check,
within the check's time budget; every one in the run's own scan). Those probes run on the
process's DECODE_SLOTS decode threads (data/decode_slots.py), at most DECODE_SLOTS of one loop
pending at once, so that both threads decode while no more than their two decodes hold pixels
(each within settings.max_decode_pixels; a queued probe holds nothing). Everything else stays in
the calling thread, one file after another: the record's lookups and additions, the progress's
stop check before each full decode and its count after each (data/decode_progress.py), and the
answers, put back in the loop's order, so a scan names the same failures in the same order as a
loop of one decode at a time would.

A stop (the progress's check raises errors.TrainingStopped) or any error but a file's own
DatasetError ends the loop: the probes not started are cancelled, those running are waited for
(at most DECODE_SLOTS, each bounded), and of those only the ones that finished and passed are
recorded (the caller's finally saves the record): nothing still being decoded is recorded.

A WebP above the decode budget is left undecided by a check with a time budget (Pillow decodes a
WebP only at full size: images._full_decode), so it is not recorded and the preflight report
counts it as not fully decoded; the run's own scan (no time budget, in the training process
before any model loads) decodes it at full size alone: the loop's other probes are drained
first and none is started until it ends, so the pixels in flight are that image's alone, as its
training decode will hold.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from lorastudio.data import decoded
from lorastudio.data.decode_slots import DECODE_SLOTS, submit_decode
from lorastudio.data.decoded import DecodedRecord, FileKey, file_key
from lorastudio.data.images import ImageInfo, oversized, probe_pixels
from lorastudio.data.safe_open import FolderId
from lorastudio.errors import DatasetError

Checked = tuple[ImageInfo | DatasetError, bool]  # probe_image's answer (or error), fully decoded


@dataclass
class _Probe:
    index: int
    path: Path
    folder_id: FolderId | None
    full: bool
    before: FileKey | None  # the file's key before a full decode (the record keeps it if unchanged)
    keyed_ns: int  # the file clock before that key (decoded.racy)
    beyond: bool = False  # a full decode above the decode budget (the run's scan, alone)


class _Loop:
    """One check loop's probes in flight, its answers and its record keeping (the calling thread's)."""

    def __init__(
        self, count: int, max_pixels: int, decode_pixels: int, record: DecodedRecord | None, colour: bool
    ) -> None:
        self.answers: list[Checked | None] = [None] * count
        self.max_pixels, self.decode_pixels, self.colour = max_pixels, decode_pixels, colour
        self.record = record
        self.progress = None if record is None else record.progress
        self.flight: dict[Future[tuple[ImageInfo, bool]], _Probe] = {}
        self.retry: list[_Probe] = []  # undecided WebPs the run's scan decodes alone
        self.full_in_flight = 0
        self.busy_since = 0.0  # when the first of the full decodes now in flight began
        self.failure: tuple[int, BaseException] | None = None  # the first other error, by order

    def spent_s(self) -> float:
        """The record's seconds of full decodes, with those in flight (wall clock: two at once
        count once, so a check's budget is the seconds it waits)."""
        spent = 0.0 if self.record is None else self.record.spent_s
        return spent + (time.monotonic() - self.busy_since if self.full_in_flight else 0.0)

    def submit(self, probe: _Probe) -> None:
        if probe.full:
            if self.progress is not None:
                self.progress.before_decode()  # a stop raises here: nothing of this file begun
            if not self.full_in_flight:
                self.busy_since = time.monotonic()
            self.full_in_flight += 1
            probe.keyed_ns = decoded.file_clock_ns()  # by the module: a test fakes its tick
            probe.before = file_key(probe.path)
        fn = partial(
            probe_pixels,
            probe.path,
            self.max_pixels,
            self.decode_pixels,
            probe.folder_id,
            colour=self.colour,
            full=probe.full,
            beyond_budget=probe.beyond,
        )
        self.flight[submit_decode(fn)] = probe

    def collect(self, until: int) -> None:
        """Take the answers of finished probes until at most `until` are in flight."""
        while len(self.flight) > until:
            done, _ = wait(self.flight, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=lambda f: self.flight[f].index):
                self._answer(self.flight.pop(future), future)

    def _answer(self, probe: _Probe, future: Future[tuple[ImageInfo, bool]]) -> None:
        if probe.full:
            self.full_in_flight -= 1
            if not self.full_in_flight and self.record is not None:
                self.record.spent_s += time.monotonic() - self.busy_since
        if future.cancelled():
            return
        err = future.exception()
        if err is None and probe.full and not future.result()[1] and self._alone_later():
            self.retry.append(probe)  # counted when decoded alone
            return
        if probe.full and self.progress is not None:
            self.progress.advance()  # passed or not: one full decode done
        if isinstance(err, DatasetError):
            self.answers[probe.index] = (err, probe.full)
            return
        if err is not None:
            if self.failure is None or probe.index < self.failure[0]:
                self.failure = (probe.index, err)
            return
        info, decided = future.result()
        full = probe.full and decided
        if full and self.record is not None:
            self.record.add(probe.path, probe.before, info, keyed_ns=probe.keyed_ns)
        self.answers[probe.index] = (info, full)

    def _alone_later(self) -> bool:
        """Whether an undecided full probe is decoded again beyond the budget: in the run's own
        scan (no time budget) only."""
        return self.record is not None and math.isinf(self.record.budget_s)

    def stop(self) -> None:
        """End the loop on an error: cancel what has not started, wait for what runs, keep
        (record) what finished."""
        for future in self.flight:
            future.cancel()
        self.collect(0)


def check_images(
    files: Sequence[tuple[Path, FolderId | None]],
    max_pixels: int,
    decode_pixels: int,
    record: DecodedRecord | None,
    *,
    colour: bool = True,
) -> list[Checked]:
    """probe_image's answer for each of `files` ((path, its folder's identity); its error
    returned, not raised) and whether every pixel of it has been decoded, in the order of
    `files`: now, when `record` wants it (its first check within the budget), which then records
    it when it passes, or before (a file the record knows as it is now is not opened; its size
    is compared with `max_pixels` again). `colour`: False for loss masks (probe_image's). The
    record's progress (the run's scan) is asked for a stop before each full decode and counts
    each after. Raises: what the stop check raises (errors.TrainingStopped), or any error of a
    probe other than a file's DatasetError (the first in `files`' order), once the probes in
    flight have ended (see the module docstring)."""
    loop = _Loop(len(files), max_pixels, decode_pixels, record, colour)
    try:
        for index, (path, folder_id) in enumerate(files):
            known = None if record is None else record.known(path)
            if known is not None:
                answer = (
                    oversized(path, known.width, known.height, max_pixels)
                    if (known.width * known.height > max_pixels)
                    else known
                )
                loop.answers[index] = (answer, True)
                continue
            loop.collect(DECODE_SLOTS - 1)
            _alone(loop)
            full = record is not None and loop.spent_s() < record.budget_s  # not known as it is now
            loop.submit(_Probe(index, path, folder_id, full, None, 0))
        loop.collect(0)
        _alone(loop)
    except BaseException:
        loop.stop()
        raise
    if loop.failure is not None:
        raise loop.failure[1]
    answers = [answer for answer in loop.answers if answer is not None]
    if len(answers) != len(files):
        raise RuntimeError("a check loop ended without an answer for each file")  # a defect here
    return answers


def _alone(loop: _Loop) -> None:
    """Raise the loop's first other error (see check_images), or decode its undecided WebPs
    beyond the budget, each with nothing else in flight."""
    if loop.failure is not None:
        raise loop.failure[1]
    if not loop.retry:
        return
    loop.collect(0)
    while loop.retry:
        probe = loop.retry.pop(0)
        loop.submit(_Probe(probe.index, probe.path, probe.folder_id, True, None, 0, beyond=True))
        loop.collect(0)
