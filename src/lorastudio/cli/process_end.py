"""The console program's end without the interpreter's teardown.

A `lorastudio` process that imported torch, diffusers and transformers spent seconds after its
command had finished in Python's finalization (every module's objects and the libraries' static
state freed one by one): 5.5-6.7 s on the loaded 2-core CPU host for the imports alone, 8.7 s after
a tiny FLUX.1 run (bench/RESULTS note 42), time a user waits for and the wall-time forecast (which
ends at train()'s end) never saw. The process's memory goes back to the OS at its exit either way.
`end_process` does what the interpreter's own shutdown does that matters to the outside, in its
order, and then exits at once: waits for the threads that are not daemons (a writer still
writing), runs the atexit handlers (the libraries' flushes, logging's), flushes stdout and stderr,
then `os._exit` with the command's status. Only the console program ends so (import_freeze.
is_standalone): a test runner or another program that calls `cli.app.main` goes on.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn


def exit_status(code: object) -> int:
    """The process status of `SystemExit(code)`, as the interpreter makes it: None 0, an int
    itself, anything else printed to stderr and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    with contextlib.suppress(OSError, ValueError):
        print(code, file=sys.stderr)
    return 1


def end_process(code: object) -> NoReturn:
    """End this process with the status of `SystemExit(code)` (exit_status), its non-daemon
    threads finished and its atexit handlers run, skipping the interpreter's finalization."""
    status = exit_status(code)
    # the interpreter's own first steps of its shutdown, in its order: threading's exit hooks (a
    # thread pool's workers are told to end by them, then joined) and the wait for every
    # non-daemon thread, then the atexit handlers; a plain join of those threads waited forever
    # on a pool's idle workers
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    else:  # another interpreter: the threads that are not daemons, as it would
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
    os._exit(status & 0xFF if status >= 0 else 1)
