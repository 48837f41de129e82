"""NO_COLOR on a terminal (session 25 CLI audit): click's styled "error:" lines (the entry point's
and a command's own) were red regardless; rich's consoles already honoured it. The CLI runs on a
pseudo-terminal here (colour is only ever written to a terminal)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

import lorastudio

SRC = str(Path(lorastudio.__file__).resolve().parents[1])


def _on_a_terminal(env: dict[str, str], *args: str) -> str:
    """What `lorastudio ARGS` wrote to its terminal (stdout and stderr)."""
    leader, follower = pty.openpty()
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "lorastudio.cli", *args],
            stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env={**os.environ, "PYTHONPATH": SRC, **env},
        )  # fmt: skip
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        child.wait(timeout=120)
    finally:
        os.close(leader)
    return seen.decode("utf-8", "replace")


@pytest.mark.parametrize(
    "args", [("runs", "show", "nope"), ("train", "nope.toml")], ids=["entry point", "command"]
)
def test_no_color_leaves_out_the_colour_on_a_terminal(args: tuple[str, ...]) -> None:
    coloured = _on_a_terminal({}, *args)
    assert "\x1b[31merror:" in coloured, coloured  # the terminal does get colour without NO_COLOR
    plain = _on_a_terminal({"NO_COLOR": "1"}, *args)
    assert "error:" in plain and "\x1b[" not in plain, plain
