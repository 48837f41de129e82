"""A training worker's own lines: its stdout, stderr and log records, kept in one file per run
(logs/<run id>.log under the studio home) and read back as a bounded tail for the API.

A spawned worker inherits the server's stdout and stderr, so without this its lines (library
warnings, tracebacks, the engine's log records) reach only the terminal that started the server.
`WorkerLog.start` (in the child) points file descriptors 1 and 2 at a pipe and copies what comes
through, in a thread, to the log file and to the original stderr, so the terminal still shows it;
the engine's INFO log records (which the server never printed) go to the file only, its warnings
to both. The
file stops growing at MAX_LOG_BYTES (a line says so); the terminal copy goes on.

Hand-written: a tee at the file-descriptor level (which also catches what C extensions print)
is what no library here offers; `logging` only sees Python's log records.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from lorastudio.settings import Settings

MAX_LOG_BYTES = 32 * 1024 * 1024  # the most one run's log file grows to
TAIL_BYTES = 1024 * 1024  # the most of a log the API reads back at once
_CHUNK = 65536
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_path(settings: Settings, run_id: str) -> Path:
    """The log file of run `run_id` (it may not exist: a CLI run, or a run of an older version)."""
    return settings.logs_dir / f"{run_id}.log"


class WorkerLog:
    """The child's tee of its own output into the run's log file. `start()` once, early in the
    child; `close()` before the process exits (it drains the pipe and restores fds 1 and 2)."""

    def __init__(self, path: Path, limit: int = MAX_LOG_BYTES):
        self.path = path
        self._limit = limit
        self._written = 0
        self._file = None
        self._thread: threading.Thread | None = None
        self._saved: tuple[int, int] | None = None
        self._handlers: list[logging.Handler] = []
        self._lock = threading.Lock()  # the copy thread and the log handler both append

    def start(self) -> WorkerLog:
        """Open the log file (appending: a resumed run's worker has its own run id, so its own
        file) and redirect fds 1 and 2 through the tee. Raises OSError when the file cannot be
        opened."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 (closed in close())
        self._written = self.path.stat().st_size
        read_end, write_end = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved = (os.dup(1), os.dup(2))
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        os.close(write_end)
        self._thread = threading.Thread(target=self._copy, args=(read_end,), name="worker-log", daemon=True)
        self._thread.start()
        # INFO records to the file only; WARNING and up through stderr (the tee), so the terminal
        # keeps seeing them as before and the file gets each record once
        quiet = logging.StreamHandler(_LineWriter(self))
        quiet.addFilter(lambda record: record.levelno < logging.WARNING)
        loud = logging.StreamHandler(sys.stderr)
        loud.setLevel(logging.WARNING)
        self._handlers = [quiet, loud]
        root = logging.getLogger()
        for handler in self._handlers:
            handler.setFormatter(logging.Formatter(_FORMAT))
            root.addHandler(handler)
        if root.level > logging.INFO or root.level == logging.NOTSET:
            root.setLevel(logging.INFO)
        return self

    def write(self, data: bytes) -> None:
        """Append `data` to the log file (not the terminal) while under the size limit. One
        call's bytes are never split by another thread's (the copy thread passes whole lines)."""
        with self._lock:
            if self._file is None or self._written >= self._limit:
                return
            room = self._limit - self._written
            piece = data[:room]
            with contextlib.suppress(OSError):  # a full disk must not end the run: the log is a copy
                self._file.write(piece)
                if len(piece) < len(data):
                    self._file.write(b"\n[log truncated: the file reached its size limit]\n")
            self._written += len(data)

    def _copy(self, read_end: int) -> None:
        """Copy the pipe to the terminal as it comes and to the file by whole lines, so that a
        log record written straight to the file between a print's text and its newline (two
        writes) lands between lines, not inside one. A line longer than _CHUNK goes as it is."""
        terminal = self._saved[1] if self._saved else 2
        pending = b""
        while chunk := os.read(read_end, _CHUNK):
            with contextlib.suppress(OSError):
                os.write(terminal, chunk)
            pending += chunk
            cut = pending.rfind(b"\n") + 1 if len(pending) <= _CHUNK else len(pending)
            if cut:
                self.write(pending[:cut])
                pending = pending[cut:]
        if pending:
            self.write(pending)
        os.close(read_end)

    def close(self, timeout: float = 5.0) -> None:
        """Flush, restore fds 1 and 2, wait (up to `timeout` s) for the copy thread to drain the
        pipe, close the file. Safe to call twice."""
        if self._saved is None:
            return
        for handler in self._handlers:
            logging.getLogger().removeHandler(handler)
        with contextlib.suppress(ValueError, OSError):
            sys.stdout.flush()
            sys.stderr.flush()
        out, err = self._saved
        self._saved = None
        os.dup2(out, 1)  # the pipe's last write end closes: the copy thread sees end of file
        os.dup2(err, 2)
        os.close(out)
        if self._thread is not None:
            self._thread.join(timeout)
        os.close(err)
        if self._file is not None:
            self._file.close()
            self._file = None


class _LineWriter:
    """A text stream for a logging handler that writes into the log file only."""

    def __init__(self, log: WorkerLog):
        self._log = log

    def write(self, text: str) -> int:
        self._log.write(text.encode("utf-8", errors="replace"))
        return len(text)

    def flush(self) -> None:
        """Nothing is buffered."""


@dataclass(frozen=True)
class LogTail:
    """The end of a log: its last `lines` (a carriage return keeps what a terminal would show:
    the text after it), whether earlier lines exist, and the file's size."""

    lines: list[str]
    truncated: bool
    size_bytes: int


def read_tail(path: Path, max_lines: int, max_bytes: int = TAIL_BYTES) -> LogTail:
    """The last `max_lines` lines of the log at `path`, reading at most `max_bytes` from its
    end. A missing file reads as empty. Raises OSError for other read failures."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - max_bytes)
            f.seek(start)
            data = f.read(size - start)
    except FileNotFoundError:
        return LogTail(lines=[], truncated=False, size_bytes=0)
    lines = data.decode("utf-8", errors="replace").split("\n")
    if start > 0:
        lines = lines[1:]  # a partial first line
    if lines and lines[-1] == "":
        lines = lines[:-1]
    shown = [line.rstrip("\r").rsplit("\r", 1)[-1] for line in lines]
    truncated = start > 0 or len(shown) > max_lines
    return LogTail(lines=shown[-max_lines:] if max_lines else [], truncated=truncated, size_bytes=size)
