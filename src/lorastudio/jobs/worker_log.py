"""A training worker's own lines: its stdout, stderr and log records, kept in one file per run
(logs/<run id>.log under the studio home) and read back as a bounded tail for the API.

A spawned worker inherits the server's stdout and stderr, so without this its lines (library
warnings, tracebacks, the engine's log records) reach only the terminal that started the server.
`WorkerLog.start` (in the child) points file descriptors 1 and 2 at a pipe and copies what comes
through, in a thread, to the log file and to the original stderr, so the terminal still shows it;
the engine's INFO log records (which the server never printed) go to the file only, its warnings
to both; the terminal copy is never cut. Each line of the process's own output is stamped with the
time in the file as a log record is (a library's warning, a traceback: RELIABILITY 783).

The log keeps its newest lines within MAX_LOG_BYTES: a file that would pass half of it is
renamed `<run id>.log.1` (replacing an older one) and a new `<run id>.log` starts with a line
saying so, so the two hold at most MAX_LOG_BYTES and always end with what the run wrote last
(its last steps, its warnings, the traceback of a crash), which the API's tail shows. Before,
the file stopped growing at the limit: a long run's log, and so the API's tail, ended with
"[log truncated ...]", never with how the run ended (RELIABILITY 782).

Hand-written: a tee at the file-descriptor level (which also catches what C extensions print)
is what no library here offers; `logging` only sees Python's log records.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from lorastudio.basemodels.hubcache import hide_userinfo
from lorastudio.settings import Settings

MAX_LOG_BYTES = 32 * 1024 * 1024  # the most one run's log (its file and the rotated one) holds
TAIL_BYTES = 1024 * 1024  # the most of a log the API reads back at once
_CHUNK = 65536
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# _FORMAT's asctime (`stamp`) and its space; a log of an older version has no offset
_STAMPED = re.compile(rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}(?:[+-]\d{4})? ")


def stamp(when: float) -> str:
    """`when` (time.time()) as a log line's time: local, with its UTC offset,
    "2026-11-01 01:30:00,123-0400". Without the offset the hour that daylight saving time's end
    repeats read the same twice, and a server's zone could not be told from the reader's."""
    local = time.localtime(when)
    millis = min(int(when % 1 * 1000), 999)
    return f"{time.strftime('%Y-%m-%d %H:%M:%S', local)},{millis:03d}{time.strftime('%z', local)}"


class _Stamped(logging.Formatter):
    """_FORMAT with `stamp`'s asctime."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 (logging's name)
        return stamp(record.created)


def print_failure(what: str, err: BaseException) -> None:
    """`what`, `err` and its traceback on stderr, once, as one of the server's own lines (`stamp`,
    `ERROR:`, the logger's name; api/server_log.py), the credentials of any URL in them hidden: an
    unexpected failure of the generation or caption worker, which keep no log of their own and
    inherit the server's console. Their reply to the server carries the message alone, and the
    traceback was printed nowhere: a bug's 500 left nothing to report (RELIABILITY 1901)."""
    text = "".join(traceback.format_exception(err)).rstrip("\n")
    line = (
        f"{stamp(time.time())} {'ERROR:':<10}lorastudio.jobs: {what}: {type(err).__name__}: {err}\n{text}\n"
    )
    with contextlib.suppress(OSError, ValueError):  # a closed console: the reply still tells the server
        sys.stderr.write(hide_userinfo(line))
        sys.stderr.flush()


def log_path(settings: Settings, run_id: str) -> Path:
    """The log file of run `run_id` (it may not exist: a CLI run, or a run of an older version)."""
    return settings.logs_dir / f"{run_id}.log"


def rotated_path(path: Path) -> Path:
    """Where log `path`'s earlier lines are once it was rotated: `<name>.1`."""
    return path.with_name(path.name + ".1")


def remove_log(settings: Settings, run_id: str) -> None:
    """Remove run `run_id`'s log and its rotated part (missing ones are fine)."""
    path = log_path(settings, run_id)
    for part in (path, rotated_path(path)):
        part.unlink(missing_ok=True)


class WorkerLog:
    """The child's tee of its own output into the run's log file. `start()` once, early in the
    child; `close()` before the process exits (it drains the pipe and restores fds 1 and 2)."""

    def __init__(self, path: Path, limit: int = MAX_LOG_BYTES):
        self.path = path
        self._part = max(1, limit // 2)  # each of the two files: the log and its rotated part
        self._written = 0
        self._file = None
        self._thread: threading.Thread | None = None
        self._saved: tuple[int, int] | None = None
        self._handlers: list[logging.Handler] = []
        self._lock = threading.Lock()  # the copy thread and the log handler both append
        self._line_start = True  # the copy thread's next byte starts a line (_stamped)
        self._told = False  # a failed write was said on the terminal (_dropped)

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
            handler.setFormatter(_Stamped(_FORMAT))
            root.addHandler(handler)
        if root.level > logging.INFO or root.level == logging.NOTSET:
            root.setLevel(logging.INFO)
        return self

    def write(self, data: bytes) -> None:
        """Append `data` to the log file (not the terminal), the credentials of any URL in it
        hidden (a hub client's retry line names an HF_ENDPOINT's `user:secret@`), first rotating the file when `data`
        would take it past its part of the limit (see the module docstring); a single write
        larger than a part keeps its end. One call's bytes are never split by another thread's
        (the copy thread passes whole lines)."""
        data = hide_userinfo(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
        with self._lock:
            if self._file is None:
                return
            if len(data) > self._part:  # its end, from a line's start where it has one
                data = data[data.find(b"\n", len(data) - self._part - 1) + 1 or len(data) - self._part :]
            try:  # a full disk must not end the run: the log is a copy
                if self._written and self._written + len(data) > self._part:
                    self._rotate()
                self._file.write(data)
            except OSError as err:
                self._dropped(err)
            self._written += len(data)

    def _dropped(self, err: OSError) -> None:
        """Say once on the terminal that the log's writes fail (a full disk): its lines are kept
        there only (the API's note names the full disk: log_disk_problem)."""
        if self._told:
            return
        self._told = True
        terminal = self._saved[1] if self._saved else 2
        with contextlib.suppress(OSError):
            os.write(
                terminal,
                f"[worker] the run's log {self.path} cannot be written ({err}): its lines go to this terminal only\n".encode(),
            )

    def _rotate(self) -> None:
        """Rename the file to its rotated path and go on in a new one that says so. Raises
        OSError (the caller drops this write; the next tries again)."""
        if self._file is None:  # closed: nothing to rotate
            return
        rotated = rotated_path(self.path)
        os.replace(self.path, rotated)
        self._file.close()
        self._file = None  # a new file that cannot be opened: the log stops, the terminal goes on
        self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 (closed in close())
        note = (
            f"[log rotated: older lines were dropped to keep this run's log ({self.path.name} and "
            f"{rotated.name}) under {2 * self._part} bytes]\n"
        ).encode()
        self._file.write(note)
        self._written = len(note)

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
                self.write(self._stamped(pending[:cut]))
                pending = pending[cut:]
        if pending:
            self.write(self._stamped(pending))
        os.close(read_end)

    def _stamped(self, data: bytes) -> bytes:
        """`data` (the process's own output, for the file) with the time at the start of each of
        its lines, as the log records carry it (`_FORMAT`'s asctime), so that a library's warning
        or a traceback in the log says when it came; the terminal copy is left as printed."""
        out = []
        for line in data.splitlines(keepends=True):
            if self._line_start and not _STAMPED.match(line):  # a record's own (the warnings' copy)
                out.append(stamp(time.time()).encode() + b" ")
            out.append(line)
            self._line_start = line.endswith(b"\n")
        return b"".join(out)

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


def _read_end(path: Path, max_bytes: int) -> tuple[bytes, int]:
    """(the last `max_bytes` of the file at `path`, its size); (b"", 0) when it is missing.
    Raises OSError for other read failures."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - max_bytes)
            f.seek(start)
            return f.read(size - start), size
    except FileNotFoundError:
        return b"", 0


def read_tail(path: Path, max_lines: int, max_bytes: int = TAIL_BYTES) -> LogTail:
    """The last `max_lines` lines of the log at `path` (with its rotated part before it, see
    WorkerLog), reading at most `max_bytes` from their end. A missing log reads as empty; the
    size is both files'. Raises OSError for other read failures."""
    try:
        now = path.stat().st_size
    except FileNotFoundError:
        now = 0
    earlier, earlier_size = b"", 0
    if now < max_bytes:  # the current file will be read whole: the rotated part before it first
        # (read first: a rotation between the two reads then misses lines for one read, never
        # shows them twice)
        earlier, earlier_size = _read_end(rotated_path(path), max_bytes - now)
    data, size = _read_end(path, max_bytes - len(earlier))
    data = earlier + data
    start = size + earlier_size - len(data)  # bytes of the log before what was read
    size += earlier_size
    if not size:
        return LogTail(lines=[], truncated=False, size_bytes=0)
    lines = data.decode("utf-8", errors="replace").split("\n")
    if start > 0:
        lines = lines[1:]  # a partial first line
    if lines and lines[-1] == "":
        lines = lines[:-1]
    shown = [line.rstrip("\r").rsplit("\r", 1)[-1] for line in lines]
    truncated = start > 0 or len(shown) > max_lines
    return LogTail(lines=shown[-max_lines:] if max_lines else [], truncated=truncated, size_bytes=size)


# Less free than this on the logs' disk reads as full: a worker's next lines cannot be kept.
LOG_DISK_FULL_BYTES = 1 << 20


def log_disk_problem(folder: Path) -> str | None:
    """Why the run logs' disk (the file system of `folder`, or of its nearest existing parent)
    cannot keep a log's lines now: "full (0.0 MB free)" under LOG_DISK_FULL_BYTES, "out of
    inodes (no file can be made there)" where no file can be created; None when it can, or when
    the file system cannot be asked. A worker drops the log's writes that fail (the log is a
    copy: the run goes on), so an empty or short log on a full disk says only this."""
    path = folder
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        fs = os.statvfs(path)
    except OSError:
        return None
    free = fs.f_bavail * fs.f_frsize
    if free < LOG_DISK_FULL_BYTES:
        return f"full ({free / 1e6:.1f} MB free)"
    if fs.f_files and not fs.f_favail:
        return "out of inodes (no file can be made there)"
    return None
