"""`lorastudio ARGS` in a real process forked from the test process, not a fresh interpreter.

A fresh `python -m lorastudio.cli train` imports Python, torch, diffusers and peft again (~5 CPU s
before its first line of work); a child forked from a test process that has them imported starts
in milliseconds. It is still a process of its own (its pid and start token, its own claims and
locks, a real SIGKILL, its exit status), which is what the tests that use it are about. Not for
a test whose subject is the fresh interpreter (its imports, environment, the console script, an
import-time warning) or a signal during the imports: those keep a real start.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from pathlib import Path


def _main(args: list[str], log: str, prepare: Callable[[], None] | None) -> None:
    from lorastudio import processes
    from lorastudio.cli.app import main

    processes.mp = multiprocessing  # the real one (tests/conftest.py's zygote is the test process's)
    if prepare is not None:
        prepare()

    with open(log, "w", encoding="utf-8") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115 - the child's own
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.argv = ["lorastudio", *args]
    code = 0
    try:
        main()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def start_cli(log: Path, *args: str, prepare: Callable[[], None] | None = None) -> BaseProcess:
    """The started child running `lorastudio ARGS`, its stdout and stderr together in `log`;
    `prepare` runs in the child first (a hook that only the child's copy of a module gets)."""
    child = multiprocessing.get_context("fork").Process(target=_main, args=(list(args), str(log), prepare))
    child.start()
    return child


def finish(child: BaseProcess, log: Path, timeout: float = 300) -> tuple[int, str]:
    """(exit status, output) once `child` ended (killed after `timeout`: a hung command)."""
    child.join(timeout)
    if child.is_alive():
        child.kill()
        child.join()
    return int(child.exitcode or 0), log.read_text(encoding="utf-8")
