"""Shell completion (session 39 CLI audit, RELIABILITY 1968): the app was built with
add_completion=False, so `lorastudio --install-completion` was "No such option" and click's own
`eval "$(_LORASTUDIO_COMPLETE=bash_source lorastudio)"` printed "Shell source not supported."
(evaluated by the shell as a command). Now the root offers --install-completion /
--show-completion and the completion variable answers with commands and options."""

from __future__ import annotations

import sys

import pytest
import typer.completion

from cli_runner import run_cli_streams


@pytest.fixture(autouse=True)
def console_script(monkeypatch: pytest.MonkeyPatch) -> None:
    """The program named `lorastudio`, as its console script is: click names it after
    `python -m PACKAGE` when __main__ is a package's (pytest's, here)."""
    monkeypatch.setattr(sys.modules["__main__"], "__package__", None, raising=False)


@pytest.mark.parametrize(
    ("words", "cword", "expected"),
    [
        ("lorastudio ru", "1", "runs"),
        ("lorastudio runs sh", "2", "show"),
        ("lorastudio train --se", "2", "--set"),
    ],
)
def test_bash_completion_answers(capsys, monkeypatch, words: str, cword: str, expected: str) -> None:
    monkeypatch.setenv("_LORASTUDIO_COMPLETE", "complete_bash")
    monkeypatch.setenv("COMP_WORDS", words)
    monkeypatch.setenv("COMP_CWORD", cword)
    code, out, err = run_cli_streams(capsys, monkeypatch)
    assert code == 0 and expected in out.split(), (out, err)


def test_the_root_offers_completion(capsys, monkeypatch) -> None:
    # `--show-completion` is a flag (the "bash" after it is not read): typer asks shellingham for
    # the shell among the test process's ancestors, and a suite started in the background (its
    # shell gone) has none: "Shell  not supported." (suitetime8). The shell is named here.
    monkeypatch.setattr(typer.completion, "_get_shell_name", lambda: "bash")
    code, out, err = run_cli_streams(capsys, monkeypatch, "--show-completion", "bash")
    assert code == 0 and "_lorastudio_completion" in out and "complete " in out, (out, err)
