"""`--json` output is JSON on stdout also when the command fails, and the run database's readers
name an unreadable database file (session 25 CLI audit), through the console entry point in this
process: `runs show ID --json` of an unknown id printed nothing on stdout; `runs list` and `runs
show` on a run database that is not a SQLite file (or a folder in its place) printed a sqlite3
traceback and exited 1."""

from __future__ import annotations

import json

import pytest

from cli_runner import run_cli_streams
from lorastudio.settings import get_settings


def test_an_error_under_json_is_json_on_stdout(capsys, monkeypatch) -> None:
    code, out, err = run_cli_streams(capsys, monkeypatch, "runs", "show", "nope", "--json")
    assert code == 2, (out, err)
    assert json.loads(out) == {"error": "NotFound", "detail": "no run with id 'nope'"}
    assert "error: no run with id 'nope'" in err
    code, out, err = run_cli_streams(capsys, monkeypatch, "runs", "show", "nope")  # text: stderr only
    assert code == 2 and out == "" and "no run with id 'nope'" in err


@pytest.mark.parametrize("damage", ["not sqlite", "a folder"])
def test_an_unreadable_run_database_is_named(capsys, monkeypatch, damage: str) -> None:
    db = get_settings().ensure_dirs().db_path
    if damage == "a folder":
        db.mkdir()
    else:
        db.write_bytes(b"these are not the bytes of a SQLite database\n" * 100)
    code, out, err = run_cli_streams(capsys, monkeypatch, "runs", "list")
    assert code == 2 and f"error: cannot read the run database {db}: " in err, (out, err)
    assert "Traceback" not in err
    code, out, err = run_cli_streams(capsys, monkeypatch, "runs", "show", "x", "--json")
    assert code == 2 and json.loads(out)["error"] == "StoreUnreadable", (out, err)


def test_a_usage_error_under_json_is_json_on_stdout(capsys, monkeypatch) -> None:
    """`runs show --json` without its ID and `models list --json --bogus` printed click's usage
    message on stderr and nothing on stdout (session 39 CLI audit, RELIABILITY 1964)."""
    for args, detail in [
        (("runs", "show", "--json"), "Missing argument 'run_id'."),
        (("models", "list", "--json", "--bogus"), "No such option: --bogus"),
        (("config", "import", "--json"), "Missing argument 'file'."),
    ]:
        code, out, err = run_cli_streams(capsys, monkeypatch, *args)
        assert code == 2 and json.loads(out) == {"error": "UsageError", "detail": detail}, (args, out)
        assert detail in err, err
    code, out, err = run_cli_streams(capsys, monkeypatch, "runs", "show")  # no --json: stderr only
    assert code == 2 and out == "" and "Missing argument" in err
