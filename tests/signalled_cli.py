"""`lorastudio ARGS` in a child process that sends itself a signal at a chosen call
(tests/reliability/test_cli_signals.py, test_cli_resume_signals.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import lorastudio

SRC = str(Path(lorastudio.__file__).resolve().parents[1])

# The child: Ctrl-C is Python's KeyboardInterrupt in it (pytest may run as a background job whose
# SIGINT is ignored, and inherited). HOOK (module, function, after how many calls) is wrapped to
# send SIGNAL to this process (TIMES times, each handled before the next) before its call, then
# run as usual.
CHILD = """
import importlib, os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
module, name, after, sig, times = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
target = importlib.import_module(module)
real = getattr(target, name)
calls = [0]

def hooked(*args, **kwargs):
    calls[0] += 1
    if calls[0] == after:
        for _ in range(times):
            os.kill(os.getpid(), sig)  # Python runs the handler before the next bytecode
    return real(*args, **kwargs)

setattr(target, name, hooked)
from lorastudio.cli.app import main
sys.argv = ["lorastudio", *sys.argv[6:]]
main()
"""


def run_signalled(
    hook: tuple[str, str, int], sig: signal.Signals, *args: str, times: int = 1
) -> subprocess.CompletedProcess[str]:
    """`lorastudio ARGS` (this process's environment, lorastudio's source first on the path) whose
    HOOK sends itself `sig` `times` times; its completed process (text output captured)."""
    module, name, after = hook
    return subprocess.run(
        [sys.executable, "-c", CHILD, module, name, str(after), str(int(sig)), str(times), *args],
        env={**os.environ, "PYTHONPATH": SRC},
        capture_output=True,
        text=True,
        timeout=300,
    )
