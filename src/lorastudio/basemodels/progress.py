"""Progress and cancellation of one fetch, fed by huggingface_hub's progress-bar hooks.

snapshot_download reports through the `tqdm_class` it is given: a bytes bar (bytes written, summed
over every file; updated per downloaded chunk) and a files bar (one step per finished file), plus
a network-transfer bar that is ignored here. `FetchTracker.bar_class()` returns a tqdm look-alike
that forwards those updates to the tracker, which emits throttled FetchProgress events and raises
`Cancelled` from inside the download when the fetch's cancel event is set.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from lorastudio.basemodels.events import EmitFetch, FetchProgress

EMIT_EVERY_S = 0.2


class Cancelled(Exception):
    """Raised inside the download when the fetch is cancelled (caught by run_fetch)."""


class FetchTracker:
    """Counts the bytes and files of one fetch. `files`: {repo path: size} of the planned files;
    files already complete in `staging` (an earlier attempt) count as done from the start."""

    def __init__(
        self,
        fetch_id: str,
        files: dict[str, int],
        staging: Path,
        emit: EmitFetch,
        cancel: threading.Event | None,
    ):
        self.fetch_id = fetch_id
        self.files_total = len(files)
        self.bytes_total = sum(files.values())
        present = {p: s for p, s in files.items() if _has_size(staging / p, s)}
        self.bytes_present = sum(present.values())
        self.downloaded = 0  # bytes written by this attempt
        self.files_done = 0
        self._emit = emit
        self._cancel = cancel
        self._lock = threading.Lock()
        self._last_emit = 0.0

    @property
    def bytes_done(self) -> int:
        return min(self.bytes_total, self.bytes_present + max(self.downloaded, 0))

    def add_bytes(self, n: float) -> None:
        with self._lock:
            self.downloaded += int(n)
        self._tick()

    def add_files(self, n: float) -> None:
        with self._lock:
            self.files_done = min(self.files_total, self.files_done + int(n))
        self._tick()

    def _tick(self) -> None:
        if self._cancel is not None and self._cancel.is_set():
            raise Cancelled()
        now = time.monotonic()
        with self._lock:
            if now - self._last_emit < EMIT_EVERY_S:
                return
            self._last_emit = now
        self._send()

    def _send(self) -> None:
        self._emit(
            FetchProgress(
                fetch_id=self.fetch_id,
                files_done=self.files_done,
                files_total=self.files_total,
                bytes_done=self.bytes_done,
                bytes_total=self.bytes_total,
            )
        )

    def finish(self) -> None:
        """Report the end state (every file and byte done)."""
        with self._lock:
            self.files_done = self.files_total
            self.downloaded = self.bytes_total
        self._send()

    def bar_class(self) -> type:
        """A tqdm stand-in class for snapshot_download's `tqdm_class` bound to this tracker."""
        tracker = self

        class Bar:
            def __init__(self, *args: Any, **kwargs: Any):
                self.total = kwargs.get("total")
                self.n = kwargs.get("initial") or 0
                desc = str(kwargs.get("desc") or "")
                bytes_bar = kwargs.get("unit") == "B"
                self._kind = (
                    "transfer" if desc.startswith("Downloading bytes") else "bytes" if bytes_bar else "files"
                )
                self.disable = False
                self.format_dict: dict[str, Any] = {"rate": None}

            def update(self, n: float | None = 1) -> None:
                step = n or 0
                self.n += step
                if self._kind == "bytes":
                    tracker.add_bytes(step)
                elif self._kind == "files":
                    tracker.add_files(step)

            def __enter__(self) -> Bar:
                return self

            def __exit__(self, *exc: object) -> None:
                return None

            def close(self) -> None:
                return None

            def refresh(self, *args: Any, **kwargs: Any) -> None:
                return None

            def set_description(self, *args: Any, **kwargs: Any) -> None:
                return None

            def set_description_str(self, *args: Any, **kwargs: Any) -> None:
                return None

            def set_postfix_str(self, *args: Any, **kwargs: Any) -> None:
                return None

        return Bar


def _has_size(path: Path, size: int) -> bool:
    try:
        return path.is_file() and path.stat().st_size == size
    except OSError:
        return False
