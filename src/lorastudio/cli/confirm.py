"""The yes/no question of a command that deletes (`datasets delete`, `models rm`, `cache clear`)
when `--yes` is not given.

typer's `confirm(abort=True)` answered a "no", an empty stdin (a script, cron, `< /dev/null`) and
a Ctrl-C alike, with a bare "Aborted!" and status 1: a script's log did not say that the command
had waited for an answer nor how to give one. Here a "no" says what was left and exits 1; no
answer at all (end of input) says to pass --yes and exits 2, as a refused command does; Ctrl-C
exits 130 like any interrupted command. A piped answer (`yes | ...`) is read as typed.
"""

from __future__ import annotations

import sys

import typer

from lorastudio.errors import ConfigError, FieldProblem

EXIT_DECLINED = 1


def confirm_or_stop(question: str, declined: str) -> None:
    """Ask `question` [y/N] on stdout and read one line of stdin; return on "y" or "yes". On
    anything else print `declined` (what was left as it was) and exit 1; at the end of input
    (or with stdin closed) raise ConfigError naming --yes (exit 2). Ctrl-C stays a
    KeyboardInterrupt (status 130; click's own prompt turned it into the same "Aborted!")."""
    typer.echo(f"{question} [y/N]: ", nl=False)
    line = sys.stdin.readline() if sys.stdin is not None else ""
    if not line:
        typer.echo("")  # end the unanswered prompt's line
        raise ConfigError([FieldProblem("--yes", f"no answer (end of input) to {question!r}: pass --yes")])
    if line.strip().lower() not in ("y", "yes"):
        typer.echo(declined, err=True)
        raise typer.Exit(EXIT_DECLINED)
