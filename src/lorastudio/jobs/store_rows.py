"""How the run store (jobs/store.py) hands out its rows: a run row as read, the output names'
sharers. Kept apart so the store's module holds its writes and reads, not their row shapes."""

from __future__ import annotations

import sqlite3
from typing import Any

from lorastudio import json_read
from lorastudio.jobs.records import LIVE_STATUSES


def read_output_sharers(conn: sqlite3.Connection, output_names: list[str]) -> dict[str, list[str]]:
    """{output name: the ids of its runs, oldest first} for each of `output_names` (the caller
    holds the store's lock), in queries of at most 500 names (SQLite's bound variables)."""
    names = sorted({n for n in output_names if n})
    found: dict[str, list[str]] = {n: [] for n in names}
    for at in range(0, len(names), 500):
        part = names[at : at + 500]
        rows = conn.execute(
            f"SELECT output_name, id FROM runs WHERE output_name IN ({','.join('?' * len(part))})"
            " ORDER BY rowid",
            part,
        ).fetchall()
        for row in rows:
            found[row["output_name"]].append(row["id"])
    return found


def settled(run: dict[str, Any], dead: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """`run` as settle_dead_owners left it, where the store could not be written."""
    fields = dead.get(run["id"])
    if fields is None or run["status"] not in {s.value for s in LIVE_STATUSES}:
        return run
    return {**run, **fields, "error": run["error"] or fields["error"]}


def as_read(run: dict[str, Any]) -> dict[str, Any]:
    """A run row as the store returns it: its source ("service" for runs recorded before
    sources were) and its warnings as a list ([] when none or unreadable)."""
    run["source"] = run.get("source") or "service"
    run["warnings"] = warnings_list(run.pop("warnings_json", None))
    return run


def warnings_list(text: str | None) -> list[str]:
    try:
        found = json_read.loads(text) if text else []
    except ValueError:
        return []
    return [w for w in found if isinstance(w, str)] if isinstance(found, list) else []
