"""The server's own log lines on its console, beside uvicorn's.

uvicorn's log config sets up its own loggers only; without a handler the `lorastudio.*` loggers
of the server process printed nothing below WARNING (and warnings bare, through Python's
last-resort handler): the GPU facts the probe child found, the standby worker's "ready" with its
import time, a run's store recovering, the killed runs' leftovers removed at a start. A user
running `lorastudio serve` sees them now, in uvicorn's style (`INFO:     lorastudio.jobs: ...`),
with ?token= values hidden as in the access log.

Each line, ours and uvicorn's own (its start, its access log), begins with its time as a run's
log has it (jobs/worker_log.stamp: local, with its UTC offset, "2026-11-01 01:30:00,123-0400"):
they carried none, so a console or a service journal kept without times (`serve > file`, a
container's log) could not say when a recovery, a refusal or a request happened.

The access log prints a successful GET (or HEAD) at most once a minute for each client host,
path and status (`RepeatedRequests`): the web UI polls a model fetch, a caption job and a
generation every second, and each poll was a line, ~3,600 an hour of the same one (RELIABILITY
1903). Any other request, an error status, and the first of a minute's repeats are printed.
"""

from __future__ import annotations

import copy
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from lorastudio.api.origin import RedactTokenFilter
from lorastudio.jobs.worker_log import stamp

LOGGER = "lorastudio"
ACCESS_LOGGER = "uvicorn.access"
REPEAT_QUIET_S = 60.0  # an identical successful GET within this long of the printed one is left out
_KEYS_KEPT = 512  # the requests remembered (the oldest are dropped past it)


class _UvicornStyle(logging.Formatter):
    """The time (`stamp`), `LEVEL:` padded to 10 columns (uvicorn's default prefix), the
    logger's name, the message."""

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"{record.levelname}:".ljust(10)
        return f"{stamp(record.created)} {prefix}{record.name}: {super().format(record)}"


def uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's own log config with each line's time first (`stamp`), as ours: its formatters'
    classes and fields kept, `%(asctime)s ` put in front, the time `stamp`'s."""
    from uvicorn.config import LOGGING_CONFIG
    from uvicorn.logging import AccessFormatter, DefaultFormatter

    config = copy.deepcopy(LOGGING_CONFIG)
    for name, base in (("default", DefaultFormatter), ("access", AccessFormatter)):
        formatter = config["formatters"][name]
        formatter["()"] = _stamped(base)
        formatter["fmt"] = "%(asctime)s " + formatter["fmt"]
    return config


def _stamped(base: type[logging.Formatter]) -> type[logging.Formatter]:
    """`base` with `stamp`'s time."""

    class Stamped(base):  # type: ignore[valid-type, misc]
        def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 (logging's name)
            return stamp(record.created)

    return Stamped


class _ServerHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the handler install_server_logging added (so a second call adds none)."""


def install_server_logging(stream: TextIO | None = None, level: int = logging.INFO) -> None:
    """Print the `lorastudio` loggers' records at `level` and above on `stream` (default stderr), once per process: a second call changes nothing. They do not also
    reach the root logger's handlers (no line twice where an embedding app configured those)."""
    logger = logging.getLogger(LOGGER)
    if any(isinstance(h, _ServerHandler) for h in logger.handlers):
        return
    handler = _ServerHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(_UvicornStyle("%(message)s"))
    handler.addFilter(RedactTokenFilter())
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


class RepeatedRequests(logging.Filter):
    """Leaves out uvicorn's access line of a successful (2xx, 3xx) GET or HEAD whose client host,
    path and status are those of one printed less than REPEAT_QUIET_S ago (a poll); keeps every
    other record. The path is the one logged (after RedactTokenFilter where that came first)."""

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        super().__init__()
        self._clock = clock if clock is not None else time.monotonic
        self._printed: dict[tuple[str, str, str, int], float] = {}
        self._lock = threading.Lock()  # uvicorn logs from its event loop; a test's threads too

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not (isinstance(args, tuple) and len(args) == 5):  # uvicorn's (client, method, path, http, status)
            return True
        client, method, path, _, status = args
        if method not in ("GET", "HEAD") or not isinstance(status, int) or not 200 <= status < 400:
            return True
        key = (str(client).rsplit(":", 1)[0], str(method), str(path), status)  # the host, not its port
        now = self._clock()
        with self._lock:
            printed = self._printed.get(key)
            if printed is not None and now - printed < REPEAT_QUIET_S:
                return False
            if len(self._printed) >= _KEYS_KEPT:  # the newest half of those still quiet
                recent = sorted(self._printed.items(), key=lambda item: item[1])[_KEYS_KEPT // 2 :]
                self._printed = {k: t for k, t in recent if now - t < REPEAT_QUIET_S}
            self._printed[key] = now
        return True


def install_quiet_repeats() -> None:
    """Add one RepeatedRequests to uvicorn's access logger (idempotent), after its other filters."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not any(isinstance(f, RepeatedRequests) for f in logger.filters):
        logger.addFilter(RepeatedRequests())
