"""The resident memory of a bench process by kind (bench/e2e_run.py's CLI runs; RESULTS note 44)."""

from __future__ import annotations

import threading
from pathlib import Path


class RssKinds:
    """Peaks of this process's anonymous and file-backed resident memory (/proc/self/status'
    RssAnon / RssFile, sampled every 0.2 s by a thread until `stop`): ru_maxrss counts the pages
    of a memory-mapped weight file the process has read as its own, which the kernel can drop."""

    def __init__(self) -> None:
        self.peaks = {"RssAnon": 0, "RssFile": 0}  # KiB
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="rss-kinds", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        status = Path("/proc/self/status")
        while not self._stop.wait(0.2):
            if not status.is_file():
                return
            for line in status.read_text(encoding="utf-8").splitlines():
                key, _, value = line.partition(":")
                if key in self.peaks:
                    self.peaks[key] = max(self.peaks[key], int(value.split()[0]))

    def stop(self) -> dict[str, float]:
        """Ends the sampling; the peaks in GiB."""
        self._stop.set()
        self._thread.join()
        return {f"peak_{k}_gib": round(v / 2**20, 2) for k, v in self.peaks.items()}
