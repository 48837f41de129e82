"""SIGTERM as an exception for every CLI command, and the exit statuses of a stopped or refused
command.

By default a SIGTERM ends Python at once: no `finally` runs, so a command killed mid-write left
what its cleanup removes: `lorastudio generate --out X.png` or `lora convert|merge|resize` their
hidden staging file next to the output, `datasets import` its staging folder under
datasets/.uploads (12 MB of copies per killed import, removed only by a server's start),
`models fetch` its download threads. Inside `sigterm_exits()`, which cli/app.main wraps around
every command, a SIGTERM raises Terminated (a SystemExit of status 143, 128 + SIGTERM, the status
a killed process reports to a shell) in the main thread, which unwinds through those `finally`
clauses as Ctrl-C's KeyboardInterrupt does. A command with its own handling takes the signal over
for a while and restores this one after: `train` stops and saves on a SIGTERM as on Ctrl-C
(cli/run_display.StopOnInterrupt), `serve` shuts down gracefully (api/app._stopping_server).
A rank of a `train --gpus N` launch keeps Python's default: torchrun stops its ranks by SIGTERM
and SIGKILLs them 30 s later.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

TERMINATED_STATUS = 128 + signal.SIGTERM
INTERRUPTED_STATUS = 128 + signal.SIGINT  # Ctrl-C (typer maps a KeyboardInterrupt to it too)
REFUSED_STATUS = 2  # the command refused what it was asked (a config's problems, a bad name)
COULD_NOT_STATUS = 1  # it could not do it now: the studio home is another process's, a write failed


def refusal_status(err: Exception) -> int:
    """The exit status of a command ended by the domain error `err` (README's exit statuses):
    1 when the studio home is held by a server or a run (HomeInUse: the same command works once
    that process ends, as for `datasets caption`, `datasets delete`, `cache clear`) or the file
    system refused a write (WriteFailed: read-only, no permission, the file-size limit, an I/O
    error; as an OSError that reaches cli/app) or a read of a file being copied (ReadFailed: an
    I/O error of an import's source), 2 for every other refusal (a full disk's NoSpaceLeft among
    them). `train` and `serve` exited 2 for a held home."""
    from lorastudio.errors import HomeInUse, ReadFailed, WriteFailed

    return COULD_NOT_STATUS if isinstance(err, HomeInUse | ReadFailed | WriteFailed) else REFUSED_STATUS


class Terminated(SystemExit):
    """A SIGTERM reached the command (status 143); a command may catch it to say what it kept."""

    def __init__(self) -> None:
        super().__init__(TERMINATED_STATUS)


def _exit(signum: int, frame: FrameType | None) -> None:
    raise Terminated()


def is_launched_rank() -> bool:
    """Whether this process is a rank that torchrun started (it sets WORLD_SIZE)."""
    return "WORLD_SIZE" in os.environ


@contextmanager
def sigterm_exits() -> Iterator[None]:
    """While the block runs, SIGTERM raises Terminated. A no-op off the main thread (Python takes
    signal handlers only there) and in a torchrun rank."""
    if threading.current_thread() is not threading.main_thread() or is_launched_rank():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
