"""Which live runs of the run store have lost their owner, and what the store records for them.

A run records the process that owns it (pid and start token, lorastudio.processes; a `lorastudio
train` run also a flock, jobs/run_owner.py). `dead_owner_fields` tells, from the rows
RunStore.settle_dead_owners read, the runs whose owner is gone (killed outright: it could not
record the end) and the fields that mark them interrupted; the store writes them. Split out of
jobs/store.py to keep it short. No SQL here, no torch.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lorastudio.jobs.records import JobStatus, now_iso
from lorastudio.jobs.run_owner import cli_owner_gone, sweep_free_locks
from lorastudio.processes import process_gone

# Why a live run whose owner is gone was marked interrupted, by the run's source.
DEAD_OWNER_ERRORS = {
    "cli": "the `lorastudio train` process (pid {pid}) ended without recording the end of this run"
    " (killed?); its newest checkpoint, if it saved one, can be resumed",
    "service": "the lorastudio server (pid {pid}) ended without recording the end of this run"
    " (killed?); its newest checkpoint, if it saved one, can be resumed",
}


def dead_owner_fields(home: Path, rows: Sequence[sqlite3.Row]) -> dict[str, dict[str, Any]]:
    """{run id: {"status", "finished_at", "error"}} for each of `rows` (live runs: id, owner_pid,
    owner_start, source, seen_at) whose owner is gone: interrupted, ended when its owner last wrote
    it (seen_at: its last step, not the time a reader noticed; now for a row an older version
    wrote). The free lock files in `home` (the store's folder) of the runs still owned are swept."""
    dead = {
        r["id"]: {
            "status": JobStatus.INTERRUPTED.value,
            "finished_at": r["seen_at"] or now_iso(),
            "error": DEAD_OWNER_ERRORS[r["source"] or "service"].format(pid=r["owner_pid"]),
        }
        for r in rows
        # both asked: a gone CLI owner's free lock file is removed whichever tells (fix 1251)
        if cli_owner_gone(home, r["id"], r["source"], r["owner_start"])
        | process_gone(r["owner_pid"], r["owner_start"])
    }
    sweep_free_locks(home, {r["id"] for r in rows if r["id"] not in dead})
    return dead
