"""The warnings a standby worker's imports draw from the libraries, said once per server life in
the server's own (stamped) log instead of printed bare at every spawn.

On a host without torchvision or torchao, transformers and diffusers warn as a standby imports
them ("`CLIPImageProcessor` requires torchvision (not installed); falling back to ...", the same
of `SiglipImageProcessor`, "Unable to import `torchao` Tensor objects ..."): through their own
stderr handlers, unstamped, on the server's console at the server's start and after every job
(RELIABILITY 2032). `held_library_warnings` (in the child, around its imports) keeps those records
from the libraries' handlers and hands them to the caller, which sends them with its "ready"
note; `say_once` (in the server) logs each the first time any standby reports it, as a
WARNING of `lorastudio.jobs` (so never silenced: a torchao-serialized checkpoint's load may need
the torchao one). Records of other levels, and every record after the imports, pass as before.

Hand-written: the libraries' verbosity switches (transformers.logging.set_verbosity_error, ...)
drop a record; none hands it to another process's log.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import threading
from collections.abc import Iterator

LIBRARIES = ("transformers", "diffusers")  # each has its own root logger and stderr handler
_LOGGING_MODULES = {"transformers": "transformers.utils.logging", "diffusers": "diffusers.utils.logging"}

_said: set[str] = set()
_said_lock = threading.Lock()


class _Held(logging.Filter):
    """A handler filter that keeps the WARNING-and-above records (as "logger: message") instead
    of letting the handler emit them; lower ones pass."""

    def __init__(self, notes: list[str]) -> None:
        super().__init__()
        self.notes = notes

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        note = f"{record.name}: {record.getMessage()}"
        if note not in self.notes:
            self.notes.append(note)
        return False


@contextlib.contextmanager
def held_library_warnings() -> Iterator[list[str]]:
    """Within the block, the warnings of LIBRARIES' loggers go to the list yielded, not to their
    handlers (each library's stderr handler is made first, by its own get_logger, so none is made
    after the filter is in place). A library not installed is left out."""
    notes: list[str] = []
    held = _Held(notes)
    handlers: list[logging.Handler] = []
    for library in LIBRARIES:
        try:
            importlib.import_module(_LOGGING_MODULES[library]).get_logger(library)  # its handler, now
        except ImportError:
            continue
        handlers.extend(logging.getLogger(library).handlers)
    for handler in handlers:
        handler.addFilter(held)
    try:
        yield notes
    finally:
        for handler in handlers:
            handler.removeFilter(held)


def say_once(log: logging.Logger, pid: int | None, notes: list[str]) -> list[str]:
    """Log each of a standby's `notes` (pid `pid`) that no standby of this server reported
    before, as a warning; returns those logged."""
    with _said_lock:
        new = [n for n in notes if n not in _said]
        _said.update(new)
    for note in new:
        log.warning("standby worker %s's imports warned (said once per server): %s", pid, note)
    return new
