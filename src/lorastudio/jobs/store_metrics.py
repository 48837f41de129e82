"""A run's metric points as the run store reads and copies them (jobs/store.py), at a cost set by
the points asked for, never by the run's length.

A 100,000-step run has 100,000 rows in `metrics` (one per step). Its page asks for at most 2,000
(the chart draws about one a pixel); the other readers of a record (its samples, each sample
image, its checkpoints, LoRAs, log) ask for none. Reading every row and thinning them in Python
cost 0.3 CPU s a request at 100,000 steps (RELIABILITY 1290), so the points are picked in SQL:
the targets spread evenly over the run's steps, each point found by the `(run_id, step)` key,
which makes a read O(max_points * log n). Spreading by step, not by row, keeps the chart even
where the rows are not (a resumed run's record starts with the original run's thinned history,
then has every step). No torch, no HTTP.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

from lorastudio.jobs.records import METRIC_KEYS

_SQLITE_MAX_INT = 2**63 - 1
PAGE = 10_000  # the points `every_point` reads at once (a 1,000,000-step run: 100 reads, ~1 MB each)
_COLUMNS = ", ".join(METRIC_KEYS)

# `:n + 1` targets from :first to :last (x * span / n: whole steps, the last target :last
# itself); each target's point is the first at or after it (never past :last, which exists)
_PICKS = f"""
WITH RECURSIVE k(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM k WHERE x < :n),
picked(step) AS (
    SELECT DISTINCT (
        SELECT step FROM metrics
        WHERE run_id = :run AND step >= :first + (x * :span) / :n
        ORDER BY step LIMIT 1
    ) FROM k
)
SELECT {_COLUMNS} FROM metrics
WHERE run_id = :run AND step IN (SELECT step FROM picked)
ORDER BY step
"""


def read_points(
    conn: sqlite3.Connection, run_id: str, max_points: int, up_to: int | None = None
) -> list[dict[str, Any]]:
    """At most `max_points` metric points of run `run_id` with step <= `up_to` (None: every
    step), oldest first: all of them when they are that few, else points spread evenly over
    their steps, the first and the last always among them. `max_points` < 1: none (nothing is
    read). The caller holds the store's lock."""
    if max_points < 1:
        return []
    bound = _SQLITE_MAX_INT if up_to is None else min(up_to, _SQLITE_MAX_INT)
    head = conn.execute(
        f"SELECT {_COLUMNS} FROM metrics WHERE run_id=? AND step<=? ORDER BY step LIMIT ?",
        (run_id, bound, max_points + 1),
    ).fetchall()
    if len(head) <= max_points:
        return [dict(r) for r in head]
    tail = conn.execute(
        f"SELECT {_COLUMNS} FROM metrics WHERE run_id=? AND step<=? ORDER BY step DESC LIMIT 1",
        (run_id, bound),
    ).fetchone()
    if max_points == 1:
        return [dict(tail)]
    first, last = int(head[0]["step"]), int(tail["step"])
    n = max_points - 1
    rows = conn.execute(_PICKS, {"run": run_id, "first": first, "span": last - first, "n": n}).fetchall()
    return [dict(r) for r in rows]


def insert_points(cur: sqlite3.Cursor, run_id: str, points: list[dict[str, Any]]) -> None:
    """Store `points` (keys of METRIC_KEYS; None for missing) of run `run_id` in the caller's
    transaction, one statement for all: a point of a step already stored replaces it."""
    cur.executemany(
        f"INSERT OR REPLACE INTO metrics (run_id, {_COLUMNS}) VALUES (?, {','.join('?' * len(METRIC_KEYS))})",
        [[run_id, *(p.get(k) for k in METRIC_KEYS)] for p in points],
    )


def every_point(conn: sqlite3.Connection, lock: threading.Lock, run_id: str) -> Iterator[dict[str, Any]]:
    """Every metric point of run `run_id`, oldest first, read PAGE at a time under `lock` (the
    store's; released between pages): `lorastudio runs metrics`, the whole series, which the
    readers above spread over at most the points they ask for. Memory is one page's. Every stored
    step is read, a negative one too (no writer makes one; a store edited by hand may hold it): the
    first page has no lower bound, each later one starts after the last step read."""
    query = f"SELECT {_COLUMNS} FROM metrics WHERE run_id=? {{}} ORDER BY step LIMIT ?"
    after: int | None = None
    while True:
        with lock:
            if after is None:
                page = conn.execute(query.format(""), (run_id, PAGE)).fetchall()
            else:
                page = conn.execute(query.format("AND step>?"), (run_id, after, PAGE)).fetchall()
        yield from (dict(r) for r in page)
        if len(page) < PAGE:
            return
        after = int(page[-1]["step"])
