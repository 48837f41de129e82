"""At 80 columns, on a terminal or piped, the list commands never cut what a user must copy:
`families` shows every default, `runs list` every run id whole (issue 30)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from typer.testing import CliRunner

from lorastudio import families
from lorastudio.cli.app import _register, app
from lorastudio.cli.tables import print_table
from lorastudio.jobs.store import RunStore
from lorastudio.settings import get_settings

RUN_ID = "3f9c2a7be41d"  # the job service's ids: 12 hex digits
OUTPUT = "portrait-of-my-dog-in-the-snow-v2-final"


@pytest.fixture(scope="module", autouse=True)
def _commands() -> None:
    if not app.registered_commands:
        _register()


def _terminal(width: int = 80) -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, width=width, force_terminal=True, color_system=None), buffer


def _defaults(spec) -> list[str]:
    return [f"{k}={v}" for k, v in spec.defaults.items()]


def test_families_at_80_columns_cuts_no_default(monkeypatch: pytest.MonkeyPatch) -> None:
    console, buffer = _terminal()
    monkeypatch.setattr("lorastudio.cli.tables.Console", lambda: console)
    assert CliRunner().invoke(app, ["families"]).exit_code == 0
    text = buffer.getvalue()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    defaults: dict[str, str] = {}  # family -> its defaults cell, wrapped lines joined
    family = ""
    for line in text.splitlines():
        cells = line.split("│")[1:-1]
        if len(cells) == 6:  # family, title, objective, defaults, family settings, generate
            family = cells[0].strip() or family
            defaults[family] = defaults.get(family, "") + cells[3].replace(" ", "")
    for fam in families.all_families():
        for default in _defaults(fam.spec):
            assert default.replace(" ", "") in defaults[fam.spec.name], default


def test_families_piped_prints_whole_lines() -> None:
    result = CliRunner().invoke(app, ["families"], env={"COLUMNS": "80"})
    assert result.exit_code == 0
    rows = {line.split("\t")[0]: line for line in result.output.splitlines()[1:]}
    for fam in families.all_families():
        for default in _defaults(fam.spec):
            assert default in rows[fam.spec.name]


def _record_run() -> None:
    store = RunStore.open(get_settings().db_path)
    try:
        store.create_run(RUN_ID, OUTPUT, "flux", {"steps": 10}, "2026-12-04T16:00:00")
    finally:
        store.close()


def test_runs_list_keeps_the_run_id_whole_piped_and_at_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    _record_run()
    piped = CliRunner().invoke(app, ["runs", "list"], env={"COLUMNS": "80"})
    assert piped.exit_code == 0, piped.output
    assert RUN_ID in piped.output and OUTPUT in piped.output
    console, buffer = _terminal()
    monkeypatch.setattr("lorastudio.cli.tables.Console", lambda: console)
    assert CliRunner().invoke(app, ["runs", "list"]).exit_code == 0
    text = buffer.getvalue()
    assert RUN_ID in text and OUTPUT in text and "…" not in text


def test_a_table_wraps_the_other_columns_instead_of_cutting() -> None:
    console, buffer = _terminal(60)
    print_table(("id", "notes"), [["x" * 30, "a long note " * 8]], keep=("id",), console=console)
    text = buffer.getvalue()
    assert "x" * 30 in text and "…" not in text
    assert "".join(text.split()).count("alongnote") == 8


def test_a_terminal_too_narrow_for_the_kept_columns_gets_records() -> None:
    console, buffer = _terminal(40)
    print_table(
        ("id", "output", "status"), [["i" * 30, "o" * 30, "done"]], keep=("id", "output"), console=console
    )
    lines = buffer.getvalue().splitlines()
    assert "id      " + "i" * 30 in lines and "output  " + "o" * 30 in lines


@pytest.mark.parametrize(
    "command",
    [["train"], ["generate"], ["models", "list"], ["runs", "show"], ["lora", "list"], ["tiny", "model"]],
)
def test_help_shows_no_value_type_for_a_flag(command: list[str]) -> None:
    """A flag (--check, --overwrite, --json, --help) takes no value: its help line names none."""
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output and "BOOLEAN" not in result.output
    assert "--help" in result.output


def test_registering_the_commands_again_adds_no_second_copy() -> None:
    """A second _register() (main() again in one process, every test module that needs the
    commands) leaves one copy of each: typer would otherwise append them all again, and every
    invocation would build each copy (~1 s per invocation late in the test suite)."""
    commands, groups = list(app.registered_commands), list(app.registered_groups)
    _register()
    assert app.registered_commands == commands and app.registered_groups == groups
    names = [g.name for g in groups] + [c.name or c.callback.__name__ for c in commands]
    assert len(names) == len(set(names)), names


def test_runs_list_says_when_its_limit_left_runs_out() -> None:
    """`runs list` lists the newest 50 by default: a store holding more says how many it left out
    (README called it "every run" while the rest were cut silently; RELIABILITY 2250)."""
    store = RunStore.open(get_settings().db_path)
    try:
        for n in range(3):
            store.create_run(f"{RUN_ID}{n}", f"{OUTPUT}-{n}", "flux", {"steps": 10}, "2026-12-04T16:00:00")
    finally:
        store.close()
    cut = CliRunner().invoke(app, ["runs", "list", "--limit", "2"], env={"COLUMNS": "200"})
    assert cut.exit_code == 0, cut.output
    assert f"{OUTPUT}-2" in cut.stdout and f"{OUTPUT}-0" not in cut.stdout  # newest first
    assert "2 of 3 runs shown, newest first: --limit 3 lists them all" in cut.stderr
    whole = CliRunner().invoke(app, ["runs", "list", "--limit", "3"], env={"COLUMNS": "200"})
    assert whole.exit_code == 0 and f"{OUTPUT}-0" in whole.stdout and "shown" not in whole.output
