"""Warm a training run's weight files into the page cache from the start of its process.

Why it exists (issue 31 item 1, RESULTS note 27): a run spends its first seconds importing
(torch, diffusers, transformers and what they pull in: 14.8 s from the CLI's start to the first
weights read for FLUX.1 on the H200), checking its settings, scanning the dataset and encoding
captions, and only then reads the denoiser; from a real disk every component's load then waits on
the disk. A background thread that reads the run's weight files (basemodels/run_files.py: the
components' files in the order the loaders need them) lets the disk work during all that, so the
loaders read from RAM. File reads release the GIL, and on Linux the kernel reads the pages without
copying them to this process (read_through): the thread costs the run's own thread a GIL hand-off
per CHUNK_BYTES read. (Reads into a buffer, 16 MiB a call, were starved of the GIL while the main
thread imported on a loaded 2-core host: 4 GB in 32 s, against 3.6-7.4 s through sendfile and
2.1-5.9 s for a cold read alone: RESULTS note 28.)

Bounds:
- memory: a file is read only when it fits what the host has available (jobs/host_memory.
  available_host_bytes, cgroup limits included) less HEADROOM_BYTES less what this prefetch has
  already read, checked again before every file; a file that does not fit is skipped (and later,
  smaller files still read), so the prefetch never pushes out the run's own working set or the
  files it warmed first;
- the run's course: when the run starts loading a part (ModelLoadStarted: text encoders, VAE,
  denoiser; `observe` / `wrap`), the files of the parts before it are skipped, the one being read
  included (the loader has read them itself); a denoiser's load started before any other part's
  (its load beside phases 1-2: training/speed/denoiser_early.py) skips nothing, its files are still
  read after the text encoders' and the VAE's; after the denoiser has loaded, or when the run ends
  or fails (`stop`), the thread stops within one chunk;
- the network: never (a hub id that is not in the hub cache has no files to read);
- the run: nothing here raises into it; a base that cannot be resolved or a file that cannot be
  read is logged at debug level and skipped (the run's own checks report real problems). One
  INFO line at the end says what was read (the training worker's log keeps it).

Started by `lorastudio train` (cli/train_cmd.py) and the job service's training worker
(jobs/worker.py). Settings.prefetch_weights (LORASTUDIO_PREFETCH_WEIGHTS=0) turns it off.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lorastudio.basemodels.run_files import LOAD_ORDER, WeightFile, run_weight_files
from lorastudio.errors import LorastudioError
from lorastudio.settings import Settings

CHUNK_BYTES = 64 * 2**20  # one read (GIL released); the stop flag is checked between reads
BUFFER_BYTES = 16 * 2**20  # the buffer of a read where sendfile cannot be used
# What the host keeps free beyond the files read: the run's own host working set (FLUX.1 on CUDA
# peaked at 3.7 GiB of RSS, RESULTS note 27) plus room for the rest of the machine.
HEADROOM_BYTES = 4 * 2**30
STOP_WAIT_S = 5.0  # how long stop() waits for the thread (a chunk: 30-100 ms from a disk)

log = logging.getLogger("lorastudio.prefetch")

Stop = Callable[[], bool]  # True: stop reading now
Reader = Callable[[Path, Stop], int]  # reads a file (stopping between chunks when told to): bytes read


@dataclass
class PrefetchReport:
    """What a prefetch did: the files it read whole, those it skipped (path, why), the bytes it
    read and when it ended (None while running)."""

    read: list[Path] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    bytes_read: int = 0
    started_at: float = field(default_factory=time.monotonic)
    ended_at: float | None = None


def read_through(path: Path, stop: Stop) -> int:
    """Read `path` from start to end into the page cache, CHUNK_BYTES a call, stopping early once
    `stop()` is true. Returns bytes read. On Linux through sendfile to /dev/null: the kernel reads
    the pages and copies nothing to this process (no buffer, and the GIL taken once a chunk);
    elsewhere through one reused buffer. Raises OSError."""
    total = 0
    with open(path, "rb", buffering=0) as handle:
        fd = handle.fileno()
        if hasattr(os, "posix_fadvise"):  # a larger kernel read-ahead for a sequential read
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        if sys.platform.startswith("linux"):
            with open(os.devnull, "wb", buffering=0) as sink:
                while not stop():
                    count = os.sendfile(sink.fileno(), fd, total, CHUNK_BYTES)
                    if not count:
                        break
                    total += count
            return total
        buffer = memoryview(bytearray(BUFFER_BYTES))
        while not stop():
            count = handle.readinto(buffer)
            if not count:
                break
            total += count
    return total


def _available_bytes() -> int | None:
    from lorastudio.jobs.host_memory import available_host_bytes

    return available_host_bytes()


class WeightPrefetch:
    """A background thread that reads `files()` (the run's weight files in load order, resolved
    on the thread) into the page cache within the bounds of the module docstring.

    `available` returns the host's available bytes (None: unknown, nothing is read); `reader`
    reads one file (tests pass a counting one). Use: `start()`, feed the run's events to
    `observe` (or emit through `wrap(emit)`), `stop()` when the run ends. Never raises from the
    thread; `report` says what it did."""

    def __init__(
        self,
        files: Callable[[], list[WeightFile]],
        *,
        available: Callable[[], int | None] = _available_bytes,
        headroom: int = HEADROOM_BYTES,
        reader: Reader = read_through,
    ) -> None:
        self._files = files
        self._available = available
        self._headroom = headroom
        self._reader = reader
        self._stop = threading.Event()
        self._passed = -1  # index in LOAD_ORDER of the last part whose load has begun
        self._started: set[str] = set()  # the parts whose load has begun
        self._thread = threading.Thread(target=self._run, name="weight-prefetch", daemon=True)
        self.report = PrefetchReport()

    def start(self) -> WeightPrefetch:
        self._thread.start()
        return self

    def stop(self, timeout: float = STOP_WAIT_S) -> None:
        """End the prefetch (the run ended or failed): the thread stops within one read."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def observe(self, event: Any) -> None:
        """Follow the run: a part's load beginning skips the files of the parts before it; the
        denoiser loaded, or the run's end (complete / error), stops the prefetch."""
        kind = getattr(event, "type", None)
        part = getattr(event, "component", None)
        if kind == "model_load_started" and part in LOAD_ORDER:
            if part == LOAD_ORDER[-1] and not self._started:  # the denoiser's load beside phases 1-2
                self._started.add(part)  # (training/speed/denoiser_early.py): the parts before it load yet
                return
            self._started.add(part)
            self._passed = max(self._passed, LOAD_ORDER.index(part))
        elif (kind == "model_load_completed" and part == "denoiser") or kind in ("complete", "error"):
            self._stop.set()

    def wrap(self, emit: Callable[[Any], None]) -> Callable[[Any], None]:
        """`emit` that also lets this prefetch observe every event (before passing it on)."""

        def emit_and_observe(event: Any) -> None:
            self.observe(event)
            emit(event)

        return emit_and_observe

    def _run(self) -> None:
        try:
            self._read_all(self._files())
        except (LorastudioError, OSError) as err:  # the run's own checks report a bad base
            log.debug("weight prefetch: no files read: %s", err)
        finally:
            self.report.ended_at = time.monotonic()
            log.info(  # in the training worker's log (jobs/worker_log.py): what the run found cached
                "weight prefetch: %d file(s), %.2f GB read in %.1f s; %d skipped",
                len(self.report.read),
                self.report.bytes_read / 1e9,
                self.report.ended_at - self.report.started_at,
                len(self.report.skipped),
            )

    def _read_all(self, files: list[WeightFile]) -> None:
        for item in files:
            if self._stop.is_set():
                return
            why = self._skip_reason(item)
            if why is not None:
                self.report.skipped.append((item.path, why))
                continue
            part = LOAD_ORDER.index(item.part)

            def passed(part: int = part) -> bool:  # the run ended, or loads past this file's part
                return self._stop.is_set() or part < self._passed

            try:
                count = self._reader(item.path, passed)
            except OSError as err:
                self.report.skipped.append((item.path, f"unreadable: {err}"))
                log.debug("weight prefetch: %s unreadable: %s", item.path, err)
                continue
            self.report.bytes_read += count
            if count >= item.size:
                self.report.read.append(item.path)
            elif not self._stop.is_set():
                self.report.skipped.append((item.path, f"the run loads past its {item.part} (partly read)"))

    def _skip_reason(self, item: WeightFile) -> str | None:
        """Why `item` is not read now (None: read it)."""
        if LOAD_ORDER.index(item.part) < self._passed:
            return f"the run already loads past its {item.part}"
        available = self._available()
        if available is None:
            return "the host's available memory is unknown"
        room = available - self._headroom - self.report.bytes_read
        if item.size > room:
            return f"{item.size / 1e9:.2f} GB does not fit the {max(room, 0) / 1e9:.2f} GB left"
        return None


def start_prefetch(data: Mapping[str, Any], settings: Settings) -> WeightPrefetch | None:
    """Start warming the weight files of the run that config `data` describes (a TrainConfig's
    fields as a mapping: base_model, revision, base_config; a config file's raw values will do,
    they are only looked up, never trusted). None when settings.prefetch_weights is off or `data`
    names no base model."""
    base = data.get("base_model")
    if not settings.prefetch_weights or not isinstance(base, str):
        return None
    revision, base_config = data.get("revision"), data.get("base_config")
    revision = revision if isinstance(revision, str) else None
    base_config = base_config if isinstance(base_config, str) else None
    return WeightPrefetch(lambda: run_weight_files(base, settings, revision, base_config)).start()
