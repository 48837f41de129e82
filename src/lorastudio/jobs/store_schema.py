"""The run store's SQLite layout (jobs/store.py's RunStore): the tables, the run columns the
store reads back and those it may update, and the migration of a store an older version wrote.

`SCHEMA` creates what is missing (CREATE TABLE IF NOT EXISTS: an existing store keeps its
rows); `add_missing_columns` then adds each column of ADDED_COLUMNS the runs table lacks (all
nullable: an older row reads as "not recorded"), safe against a second process opening the
same store at the same moment; `place_outputs` gives each output name its place in the LoRA
list (output_places, below). No other change of an existing store is ever made.

output_places (session 36 kpfix5, RELIABILITY 1342): each output name's place in the order runs
were recorded, kept beside `runs` so that deleting a run record never moves a LoRA down (the
list's cursor is a place: a LoRA whose newest record was deleted between two pages came again on
a later one). `place` only grows: a new run of a name gives it a place above every other
(`place_output`); `newest` is the rowid of the newest run that placed it, so a run an older
version recorded meanwhile (it knows no places) is placed at the next open, in its rowid's order
among those. Places start on the rowids' scale (a store of an older version: each name's newest
run's rowid, the order the list had), so a name a read-only store could not place yet sorts by
its newest rowid among them.
"""

from __future__ import annotations

import sqlite3

from lorastudio.errors import is_no_space

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    output_name TEXT NOT NULL,
    family TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at TEXT NOT NULL,
    started_at TEXT,
    finished_at TEXT,
    config_json TEXT NOT NULL,
    steps_run INTEGER NOT NULL DEFAULT 0,
    total_steps INTEGER,
    last_loss REAL,
    error TEXT,
    plan_json TEXT,
    source TEXT,
    owner_pid INTEGER,
    owner_start TEXT
);
CREATE TABLE IF NOT EXISTS metrics (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    epoch INTEGER,
    loss REAL,
    avg_loss REAL,
    lr REAL,
    grad_norm REAL,
    samples_per_second REAL,
    peak_memory_gb REAL,
    PRIMARY KEY (run_id, step)
);
CREATE TABLE IF NOT EXISTS validation (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    loss REAL,
    PRIMARY KEY (run_id, step)
);
CREATE TABLE IF NOT EXISTS output_places (
    output_name TEXT PRIMARY KEY,
    place INTEGER NOT NULL,
    newest INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS outputs (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    path TEXT NOT NULL,
    PRIMARY KEY (run_id, kind, path)
);
"""

RUN_COLUMNS = (
    "id",
    "output_name",
    "family",
    "status",
    "created_at",
    "started_at",
    "finished_at",
    "steps_run",
    "total_steps",
    "last_loss",
    "error",
    "source",
    "elapsed_s",
)
UPDATABLE = frozenset(RUN_COLUMNS) - {"id", "output_name", "family", "created_at", "source"}
# Columns added after the first release: (name, SQL type), added to an older store on open.
ADDED_COLUMNS: tuple[tuple[str, str], ...] = (
    ("plan_json", "TEXT"),
    ("source", "TEXT"),
    ("owner_pid", "INTEGER"),  # the `lorastudio train` process of a CLI run, the server of a service run
    ("owner_start", "TEXT"),  # its processes.start_token (a reused pid is another process)
    ("warnings_json", "TEXT"),  # a JSON list: what failed without failing the run (warning events)
    ("elapsed_s", "REAL"),  # started_at to finished_at on the recording process's monotonic clock
    ("dataset_warnings_json", "TEXT"),  # a JSON list: the dataset scan's warnings (DatasetWarnings event)
    # when its owner last wrote the run (recorded, a status, a step): a killed run's end as a later
    # reader tells it, not the time it looked (RELIABILITY 1902)
    ("seen_at", "TEXT"),
)


def add_missing_columns(conn: sqlite3.Connection) -> None:
    """Bring a store written by an older version up to the current runs table (new columns are
    nullable, so existing rows read as "not recorded")."""
    for name, kind in ADDED_COLUMNS:
        if name in run_columns(conn):
            continue
        try:
            conn.execute(f"ALTER TABLE runs ADD COLUMN {name} {kind}")
        except sqlite3.OperationalError:
            if name not in run_columns(conn):  # not a concurrent opener that added it first
                raise


def run_columns(conn: sqlite3.Connection) -> set[str]:
    """The runs table's column names in the store at `conn` (whose row_factory is sqlite3.Row)."""
    return {row["name"] for row in conn.execute("PRAGMA table_info(runs)")}


def place_output(cur: sqlite3.Cursor, output_name: str, rowid: int) -> None:
    """Put `output_name` above every other name of output_places (a run of it was just recorded as
    `rowid`), in the caller's transaction."""
    cur.execute(
        "INSERT OR REPLACE INTO output_places (output_name, place, newest) VALUES"  # no UPSERT: any SQLite 3
        " (?, MAX((SELECT COALESCE(MAX(place), 0) + 1 FROM output_places), ?), ?)",
        (output_name, rowid, rowid),
    )


def place_outputs(conn: sqlite3.Connection) -> None:
    """Place each output name whose newest run is not placed yet (a store of an older version, or
    runs an older version recorded since), oldest newest run first, in one transaction; a store
    that cannot be written (read-only, full) is left as it is (RunStore.output_order reads those names by
    their newest rowid)."""
    unplaced = (
        "SELECT name, newest FROM (SELECT output_name AS name, MAX(rowid) AS newest FROM runs GROUP BY output_name) r"
        " WHERE NOT EXISTS (SELECT 1 FROM output_places p WHERE p.output_name = r.name AND p.newest >= r.newest)"
        " ORDER BY newest"
    )
    if not conn.execute(unplaced).fetchall():
        return
    try:
        cur = conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            for row in cur.execute(unplaced).fetchall():  # read again under the write lock
                place_output(cur, str(row[0]), int(row[1]))
            cur.execute("COMMIT")
        except sqlite3.Error:
            if conn.in_transaction:
                cur.execute("ROLLBACK")
            raise
    except sqlite3.OperationalError as err:
        if "readonly" not in str(err) and not is_no_space(err):
            raise


def read_output_order(conn: sqlite3.Connection) -> dict[str, int]:
    """Each output name's place: where its newest run put it (output_places), or for a name not
    placed yet its newest run's rowid (a run an older version recorded: placed at the next open)."""
    rows = conn.execute(
        "SELECT output_name, place FROM output_places UNION ALL"
        " SELECT output_name, MAX(rowid) FROM runs"
        " WHERE output_name NOT IN (SELECT output_name FROM output_places) GROUP BY output_name"
    ).fetchall()
    return {str(r[0]): int(r[1]) for r in rows}


def open_schema(conn: sqlite3.Connection) -> None:
    """Make an opened store's tables current: create what is missing (SCHEMA), add the columns
    an older version's store lacks, place the output names an older version recorded."""
    conn.executescript(SCHEMA)
    add_missing_columns(conn)
    place_outputs(conn)
