"""The server's own log lines on its console, beside uvicorn's.

uvicorn's log config sets up its own loggers only; without a handler the `lorastudio.*` loggers
of the server process printed nothing below WARNING (and warnings bare, through Python's
last-resort handler): the GPU facts the probe child found, the standby worker's "ready" with its
import time, a run's store recovering, the killed runs' leftovers removed at a start. A user
running `lorastudio serve` sees them now, in uvicorn's style (`INFO:     lorastudio.jobs: ...`),
with ?token= values hidden as in the access log.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from lorastudio.api.origin import RedactTokenFilter

LOGGER = "lorastudio"


class _UvicornStyle(logging.Formatter):
    """`LEVEL:` padded to 10 columns (uvicorn's default prefix), the logger's name, the message."""

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"{record.levelname}:".ljust(10)
        return f"{prefix}{record.name}: {super().format(record)}"


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
