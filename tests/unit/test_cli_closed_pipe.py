"""A command whose stdout is a pipe with no reader (`lorastudio runs list | head -1` after head
has gone) ends as coreutils do: killed by SIGPIPE (141 in a shell), nothing on stderr. Before,
click turned the EPIPE into a bare exit 1, which `set -o pipefail` reads as a failure of ours."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest


def _run_into_closed_pipe(home: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """`lorastudio ARGS` with stdout a pipe whose read end is closed before it starts."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write of the child then meets EPIPE: no race with a reader
    env = {**os.environ, "LORASTUDIO_HOME": str(home), "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        return subprocess.run(
            [sys.executable, "-m", "lorastudio.cli", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            env=env,
            timeout=120,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize("args", [("runs", "list"), ("families",), ("--help",)])
def test_closed_stdout_pipe_ends_by_sigpipe_quietly(tmp_path: Path, args: tuple[str, ...]) -> None:
    done = _run_into_closed_pipe(tmp_path / "home", *args)
    assert done.returncode == -signal.SIGPIPE, (done.returncode, done.stderr.decode()[-2000:])
    assert done.stderr == b""


def test_a_sigpipe_death_keeps_sigpipe_ignored_until_the_end(tmp_path: Path) -> None:
    """A command that writes nothing keeps its ordinary status: the SIGPIPE default is restored
    only for a write that found no reader (a server's sockets keep it ignored)."""
    done = _run_into_closed_pipe(tmp_path / "home", "runs", "show", "no-such-run")
    assert done.returncode == 2, done.stderr.decode()[-2000:]
    assert b"no-such-run" in done.stderr


def test_click_8_5s_pacify_wrapper_is_taken_as_a_closed_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """click 8.5 names its wrapper _PacifyFlushWrapper (PacifyFlushWrapper before, and in typer's
    own copy of click): `runs list` into a closed pipe then exited 1 (RELIABILITY 1471)."""
    from lorastudio.cli.app import _output_closed

    class _PacifyFlushWrapper:  # what click 8.5 puts in sys.stdout's place after an EPIPE
        def flush(self) -> None:
            """click's wrapper swallows the EPIPE of a flush."""

    monkeypatch.setattr(sys, "stdout", _PacifyFlushWrapper())
    assert _output_closed()
