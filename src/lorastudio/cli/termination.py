"""SIGTERM as an exception for the CLI commands that write a file under a staging name.

By default a SIGTERM ends Python at once: no `finally` runs, so `lorastudio generate --out X.png`
or `lora convert|merge|resize` killed mid-write left its hidden staging file next to the output.
Inside `sigterm_exits()` a SIGTERM raises SystemExit(143) (128 + SIGTERM, the status a killed
process reports to a shell) in the main thread, which unwinds through those `finally` clauses;
Ctrl-C's KeyboardInterrupt already does. Scoped to the commands that need it (not `train`, which
stops and saves on a SIGTERM as on Ctrl-C: cli/run_display.StopOnInterrupt, nor `serve`, which
has its own shutdown) and restored after.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

TERMINATED_STATUS = 128 + signal.SIGTERM


def _exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(TERMINATED_STATUS)


@contextmanager
def sigterm_exits() -> Iterator[None]:
    """While the block runs, SIGTERM raises SystemExit(143). A no-op off the main thread (Python
    takes signal handlers only there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
