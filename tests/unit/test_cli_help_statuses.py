"""`lorastudio --help` lists every exit status the commands use (session 39 CLI audit: README
said them, `--help` did not), each from the constant the commands exit with."""

from __future__ import annotations

from cli_runner import run_cli


def test_the_root_help_lists_every_exit_status(capsys, monkeypatch) -> None:
    from lorastudio.cli.caption_cmd import EXIT_BUSY
    from lorastudio.cli.serve_cmd import EXIT_CANNOT_LISTEN
    from lorastudio.cli.termination import (
        COULD_NOT_STATUS,
        INTERRUPTED_STATUS,
        REFUSED_STATUS,
        TERMINATED_STATUS,
    )

    code, text = run_cli(capsys, monkeypatch, "--help")
    text = " ".join(text.split())
    assert code == 0, text
    assert EXIT_BUSY == EXIT_CANNOT_LISTEN == 3
    for status, what in [
        (0, "done"),
        (COULD_NOT_STATUS, "could not"),
        (REFUSED_STATUS, "refused"),
        (EXIT_BUSY, "`datasets caption` found the dataset busy or `serve` cannot listen"),
        (INTERRUPTED_STATUS, "Ctrl-C"),
        (TERMINATED_STATUS, "SIGTERM"),
    ]:
        assert f"{status} {what}" in text, (status, text)
