"""Run `lorastudio ARGS` in this process through the console entry point, as a user's shell would."""

from __future__ import annotations

import sys

import pytest


def run_cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str
) -> tuple[int, str]:
    """(exit status, what it printed on stdout and stderr, newlines removed) of `lorastudio ARGS`."""
    code, out, err = run_cli_streams(capsys, monkeypatch, *args)
    return code, (out + err).replace("\n", "")


def run_cli_streams(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str
) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `lorastudio ARGS`, each stream as printed."""
    from lorastudio.cli.app import main

    monkeypatch.setattr(sys, "argv", ["lorastudio", *args])
    # the console program's `train` freezes its imports (import_freeze.py); this runner's process
    # goes on to other tests, so it is not marked as that program
    monkeypatch.setattr("lorastudio.cli.app.mark_standalone", lambda: None)
    capsys.readouterr()
    try:
        main()
        code = 0
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err
