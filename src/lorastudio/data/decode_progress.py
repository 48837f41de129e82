"""What the run's own decode scan reports while it runs, and how a stop ends it.

The run's preflight decodes every pixel of each image its folder's record (data/decoded.py) does
not list (RELIABILITY 165, 166): targets, control images and loss masks. On a large dataset
copied in by hand that takes minutes before any model loads (~16 ms an image at 512 px), so the
scan is handed a DecodeProgress (data/run_scan.scan_for_run's `progress`), which

- hears, before each check loop (a folder's targets, its control images, its loss masks), how
  many of the files it is about to meet are not recorded (`expect`: the total grows as the
  scan reaches each kind and folder, so it is final once the scan ends);
- counts each full decode (`advance`, whether the file passed or not);
- reports (done, total) through `report` once the scan has decoded for `after_s` seconds (a scan
  of a few new images says nothing), then at most once per `every_s` seconds, and the last
  count at `finish` (a bounded rate, never one call per image); nothing at all when every file
  was recorded already;
- calls `check_stop` before each full decode: it raises (errors.TrainingStopped) to end the scan
  at once; the records keep what was decoded so far (each scan saves its record in a finally).

No torch; called from the scan's own thread only (its decodes run on the decode threads, two at
once, but their stop checks and counts are taken in the scan's thread: data/decode_checks.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable

REPORT_AFTER_S = 1.0  # a scan's first report: once it has decoded this long
REPORT_EVERY_S = 0.5  # then at most this often (the last count always comes)


class DecodeProgress:
    """The count of one run's full decodes (see the module docstring)."""

    def __init__(
        self,
        report: Callable[[int, int], None],
        check_stop: Callable[[], None] | None = None,
        every_s: float | None = None,
        after_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._report = report
        self._check_stop = check_stop
        self._every_s = REPORT_EVERY_S if every_s is None else every_s
        self._after_s = REPORT_AFTER_S if after_s is None else after_s
        self._clock = clock
        self.done = 0  # files decoded fully so far
        self.total = 0  # files expected so far (not recorded when their check loop began)
        self._sent: tuple[int, int] | None = None  # the last count reported
        self._sent_at = 0.0
        self._started: float | None = None  # when the first file was expected

    def expect(self, count: int) -> None:
        """`count` more files will be decoded fully (reported with the next count)."""
        if count <= 0:
            return
        self.total += count
        if self._started is None:
            self._started = self._clock()
        self._maybe_send()

    def before_decode(self) -> None:
        """Called before each full decode: the stop check (raises to end the scan)."""
        if self._check_stop is not None:
            self._check_stop()

    def advance(self) -> None:
        """One full decode done (passed or not)."""
        self.done += 1
        self.total = max(self.total, self.done)  # a file changed after its loop's count
        self._maybe_send()

    def finish(self) -> None:
        """The scan ended: report the final count when the scan reported at all and this count
        was not the last one sent."""
        if self._sent is not None and self._sent != (self.done, self.total):
            self._send()

    def _maybe_send(self) -> None:
        now = self._clock()
        if self._sent is None:
            due = self._started is not None and now - self._started >= self._after_s
        else:
            due = now - self._sent_at >= self._every_s
        if due:
            self._send()

    def _send(self) -> None:
        self._sent, self._sent_at = (self.done, self.total), self._clock()
        self._report(self.done, self.total)
