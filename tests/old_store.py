"""A run store as the first versions wrote it (the runs table before plans, sources and dataset
warnings), holding one finished run, for the tests of the store's in-place upgrades."""

from __future__ import annotations

import sqlite3
from pathlib import Path

FIRST_RUNS_TABLE = (
    "CREATE TABLE runs (id TEXT PRIMARY KEY, output_name TEXT NOT NULL, family TEXT NOT NULL,"
    " status TEXT NOT NULL, created_at TEXT NOT NULL, started_at TEXT, finished_at TEXT,"
    " config_json TEXT NOT NULL, steps_run INTEGER NOT NULL DEFAULT 0, total_steps INTEGER,"
    " last_loss REAL, error TEXT)"
)


def first_version_store(path: Path, run_id: str, output_name: str, created_at: str) -> Path:
    """Write `path` as a store of the first layout with one completed FLUX.1 run; returns `path`."""
    conn = sqlite3.connect(path)
    try:
        conn.execute(FIRST_RUNS_TABLE)
        conn.execute(
            "INSERT INTO runs (id, output_name, family, status, created_at, config_json) VALUES (?,?,?,?,?,?)",
            (run_id, output_name, "flux", "completed", created_at, "{}"),
        )
        conn.commit()
    finally:
        conn.close()
    return path
