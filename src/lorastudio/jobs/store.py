"""The run store: every training run, its config, metric points, outputs and error, in SQLite.

It survives a server restart. `RunStore.open` marks every run that was live when the previous
server died as interrupted. Every run records the process that owns it (pid and start token,
lorastudio.processes): a `lorastudio train` run its own process, a server's run the server's
(whose workers die with it); every read first marks a live run whose process is gone
interrupted, so no reader shows a dead run as running. Every write is one transaction; a full
disk raises NoSpaceLeft and leaves the store as it was. Thread-safe (one connection behind a
lock). The tables and the migration of an older store: jobs/store_schema.py; which live runs' owners
are gone: jobs/dead_owners.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from lorastudio import json_read
from lorastudio.errors import NoSpaceLeft, NotFound, is_no_space
from lorastudio.file_modes import follow_umask_path
from lorastudio.jobs.dead_owners import dead_owner_fields
from lorastudio.jobs.records import LIVE_STATUSES, JobStatus, now_iso
from lorastudio.jobs.run_search import SQL_FUNCTION, query_words
from lorastudio.jobs.run_search import register as register_search
from lorastudio.jobs.store_metrics import every_point, insert_points, read_points
from lorastudio.jobs.store_rows import as_read, read_output_sharers, settled, warnings_list
from lorastudio.jobs.store_schema import RUN_COLUMNS, UPDATABLE, open_schema, place_output, read_output_order

# Who started a run: the job service (API, UI) or a `lorastudio train` command.
SOURCES: frozenset[str] = frozenset({"service", "cli"})


_SQLITE_MAX_INT = 2**63 - 1  # a larger Python int is an OverflowError in a query's parameter


class RunStore:
    """Run records in one SQLite file. Use `RunStore.open(path)`; `close()` when done."""

    def __init__(self, conn: sqlite3.Connection, path: Path):
        self._conn = conn
        self._lock = threading.RLock()
        self.path = path

    @classmethod
    def open(cls, path: Path, *, recover: bool = True) -> RunStore:
        """Open (creating if needed) the store at `path`. With `recover` (the server, at start)
        every run left live by a previous server is marked interrupted; readers that run next
        to a live server (the CLI) pass recover=False."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # sqlite makes it 0644 whatever the umask
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666))
        for made in (path, path.with_name(f"{path.name}-wal"), path.with_name(f"{path.name}-shm")):
            follow_umask_path(made)  # an older version's 0644 database (file_modes.py)
        conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=10)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=ON")
        register_search(conn)  # GET /api/runs' q (jobs/run_search.py)
        open_schema(conn)
        store = cls(conn, path)
        if recover:
            store.mark_interrupted()
        return store

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Cursor]:
        """One transaction: committed when the block ends, rolled back if it raises (also when
        the COMMIT fails). Raises NoSpaceLeft when the disk is full (the store is unchanged and
        usable again once there is room), sqlite3.Error for other store failures."""
        with self._lock:
            cur = self._conn.cursor()
            try:
                cur.execute("BEGIN IMMEDIATE")
                try:
                    yield cur
                    cur.execute("COMMIT")
                except BaseException:
                    if self._conn.in_transaction:  # SQLite may have rolled back already
                        with suppress(sqlite3.Error):
                            cur.execute("ROLLBACK")
                    raise
            except sqlite3.Error as err:
                if is_no_space(err):
                    raise NoSpaceLeft("the run store could not be written", self.path) from err
                raise

    # -- writes ----------------------------------------------------------------------------------
    def mark_interrupted(self) -> int:
        """Mark every run still recorded as live as interrupted, ended when its owner last wrote it
        (seen_at; now for a row an older version wrote); returns how many."""
        live = [s.value for s in LIVE_STATUSES]
        marks = ",".join("?" * len(live))
        with self._tx() as cur:
            cur.execute(
                "UPDATE runs SET status=?, finished_at=COALESCE(seen_at, ?), error=COALESCE(error, ?)"
                f" WHERE status IN ({marks})",
                [JobStatus.INTERRUPTED.value, now_iso(), "the server stopped while this run was live", *live],
            )
            return cur.rowcount

    def settle_dead_owners(self) -> dict[str, dict[str, Any]]:
        """Mark every live run whose recorded process is gone (killed outright: it could not
        record the end) interrupted, ended when its owner last wrote it (seen_at: its last step,
        not the time a reader noticed; now for a row an older version wrote); returns {run id: the
        fields set}, also where the store cannot be written (read-only, full disk), so a reader
        reports them all the same."""
        live = [s.value for s in LIVE_STATUSES]
        marks = ",".join("?" * len(live))
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, owner_pid, owner_start, source, seen_at FROM runs"
                f" WHERE owner_pid IS NOT NULL AND status IN ({marks})",
                live,
            ).fetchall()
        dead = dead_owner_fields(self.path.parent, rows)  # also sweeps the live ones' free lock files
        if not dead:
            return dead
        # a store this reader cannot write: the readers report the runs from `dead` (store_rows.settled)
        with suppress(sqlite3.Error, NoSpaceLeft), self._tx() as cur:
            for run_id, fields in dead.items():
                cur.execute(
                    f"UPDATE runs SET status=?, finished_at=?, error=COALESCE(error, ?) WHERE id=?"
                    f" AND status IN ({marks})",
                    [fields["status"], fields["finished_at"], fields["error"], run_id, *live],
                )
        return dead

    def create_run(
        self,
        run_id: str,
        output_name: str,
        family: str,
        config: dict[str, Any],
        created_at: str,
        *,
        source: str = "service",
        status: JobStatus = JobStatus.QUEUED,
        owner: tuple[int, str | None] | None = None,
    ) -> None:
        """Record a new run (queued unless `status` says otherwise) with its resolved config;
        `source` (SOURCES) says who started it; `owner`: (pid, processes.start_token) of the
        process that owns it (a CLI run's own, a server run's server), whose death readers detect. Its total_steps is the
        config's `steps`, or None for an epoch run (num_epochs > 0: `steps` is ignored, the length
        is known once the run scans its dataset; its progress events set it). Raises ValueError
        for an unknown source."""
        if source not in SOURCES:
            raise ValueError(f"unknown run source {source!r}")
        pid, start = owner if owner is not None else (None, None)
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO runs (id, output_name, family, status, created_at, config_json, total_steps,"
                " source, owner_pid, owner_start, seen_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    output_name,
                    family,
                    status.value,
                    created_at,
                    json.dumps(config),
                    None if config.get("num_epochs") else config.get("steps"),
                    source,
                    pid,
                    start,
                    now_iso(),
                ),
            )
            place_output(cur, output_name, int(cur.lastrowid or 0))  # the LoRA list's top (store_schema.py)

    def update_run(self, run_id: str, **fields: Any) -> None:
        """Set some columns of a run (status, started_at, finished_at, steps_run, error, ...), its
        seen_at now (its owner writes it)."""
        bad = set(fields) - UPDATABLE
        if bad:
            raise ValueError(f"not updatable: {sorted(bad)}")
        if not fields:
            return
        sets = ", ".join(f"{k}=?" for k in fields)
        values = [v.value if isinstance(v, JobStatus) else v for v in fields.values()]
        with self._tx() as cur:
            cur.execute(f"UPDATE runs SET {sets}, seen_at=? WHERE id=?", [*values, now_iso(), run_id])

    def add_metric(self, run_id: str, point: dict[str, Any]) -> None:
        """Store one metric point (keys of METRIC_KEYS; None for missing) and the run's progress."""
        self.add_metrics(run_id, [point])

    def add_metrics(self, run_id: str, points: list[dict[str, Any]]) -> None:
        """Store metric points in one transaction (a resume's carried history: a commit a point
        held the job service's lock ~1 ms each, RELIABILITY 1292) and the run's progress."""
        if not points:
            return
        last = max(points, key=lambda p: p["step"])
        with self._tx() as cur:
            insert_points(cur, run_id, points)
            cur.execute(
                "UPDATE runs SET steps_run=MAX(steps_run, ?), last_loss=?, seen_at=? WHERE id=?",
                (last["step"], last.get("loss"), now_iso(), run_id),
            )

    def add_validation(self, run_id: str, point: dict[str, Any]) -> None:
        """Store one validation round of a run ({step, loss}; a round of the same step replaces it)."""
        with self._tx() as cur:
            cur.execute(
                "INSERT OR REPLACE INTO validation (run_id, step, loss) VALUES (?, ?, ?)",
                (run_id, point["step"], point.get("loss")),
            )

    def set_plan(self, run_id: str, plan: dict[str, Any]) -> None:
        """Record the plan a run uses (its sanitised plan_chosen event: precision, checkpointing,
        offload, micro-batch, compile, how it was decided, trials, fallbacks). A later call
        replaces it."""
        with self._tx() as cur:
            cur.execute("UPDATE runs SET plan_json=? WHERE id=?", (json.dumps(plan, allow_nan=False), run_id))

    def set_dataset_warnings(self, run_id: str, warnings: list[str]) -> None:
        """Record what may hurt a run about its dataset (its DatasetWarnings event: the preflight's
        `dataset.warnings`). A later call replaces them (a resume scans again)."""
        with self._tx() as cur:
            cur.execute("UPDATE runs SET dataset_warnings_json=? WHERE id=?", (json.dumps(warnings), run_id))

    def add_warning(self, run_id: str, message: str, *, output_name: str | None = None) -> bool:
        """Add one warning to a run's record (a part of the run that failed without failing it:
        the engine's warning event; what a clean-up removed of a killed run), in one statement
        (appended, never a read-modify-write: concurrent writers each keep theirs). With
        `output_name`, only to a run of that output name. Returns whether a record took it
        (False: no such run)."""
        with self._tx() as cur:
            cur.execute(
                "UPDATE runs SET warnings_json=json_insert(COALESCE(warnings_json, '[]'), '$[#]', ?)"
                " WHERE id=? AND (? IS NULL OR output_name=?)",
                (message, run_id, output_name, output_name),
            )
            return cur.rowcount > 0

    def add_output(self, run_id: str, kind: str, path: str) -> None:
        """Record one output file of a run (kind: "lora", "sidecar", ...)."""
        with self._tx() as cur:
            cur.execute(
                "INSERT OR IGNORE INTO outputs (run_id, kind, path) VALUES (?, ?, ?)", (run_id, kind, path)
            )

    def finish_run(
        self, run_id: str, status: JobStatus, finished_at: str, error: str | None, steps_run: int,
        lora_path: str | None, elapsed_s: float | None = None,
    ) -> None:  # fmt: skip
        """Record a run's final state and what it left: its LoRA file and, when it exists next to
        it, the LoRA's sidecar JSON. `elapsed_s`: its start to its end on the recording process's
        monotonic clock (None: not measured; a reader then takes finished_at less started_at,
        two wall-clock stamps that a clock step between them moves)."""
        self.update_run(
            run_id,
            status=status,
            finished_at=finished_at,
            error=error,
            steps_run=steps_run,
            elapsed_s=elapsed_s,
        )
        if lora_path:
            self.add_output(run_id, "lora", lora_path)
            sidecar = Path(lora_path).with_suffix(".json")
            if sidecar.is_file():
                self.add_output(run_id, "sidecar", str(sidecar))

    def delete_run(self, run_id: str) -> None:
        """Delete a run with its metrics and outputs. Raises NotFound."""
        with self._tx() as cur:
            cur.execute("DELETE FROM runs WHERE id=?", (run_id,))
            if cur.rowcount == 0:
                raise NotFound(f"no run with id {run_id!r}")

    # -- reads -----------------------------------------------------------------------------------
    def list_runs(self, limit: int = 200) -> list[dict[str, Any]]:
        """The newest runs first, at most `limit` (any size: one past SQLite's 64-bit integers
        means all): `runs_page`'s first page."""
        return self.runs_page(limit)[0]

    def runs_page(
        self, limit: int = 200, before: int | None = None, query: str | None = None
    ) -> tuple[list[dict[str, Any]], int, int | None]:
        """(runs, total, next): at most `limit` runs, newest first, without configs or metrics
        (dead owners settled first); `total` in the store (with `query`: those it keeps);
        `next`, the `before` of the next page (None after the last). `before`: only runs
        recorded before the one a page ended on, so runs made or deleted between pages repeat
        or skip none. Newest by rowid (the order of recording), not `created_at`: a clock set
        back listed later runs below earlier ones. `query`: only the runs whose name, id or
        base_model holds each of its words (jobs/run_search.py; blank: every run)."""
        dead = self.settle_dead_owners()
        limit = max(1, min(limit, _SQLITE_MAX_INT - 1))
        search = query if query and query_words(query) else None
        where = f" AND {SQL_FUNCTION}(?, id, output_name, config_json)" if search else ""
        kept = (search,) if search else ()
        with self._lock:
            rows = self._conn.execute(
                f"SELECT rowid AS seq, {', '.join(RUN_COLUMNS)}, warnings_json FROM runs WHERE rowid < ?{where}"
                " ORDER BY rowid DESC LIMIT ?",
                (_SQLITE_MAX_INT if before is None else min(before, _SQLITE_MAX_INT), *kept, limit + 1),
            ).fetchall()
            counted = (
                f"SELECT COUNT(*) FROM runs WHERE {where[5:]}" if search else "SELECT COUNT(*) FROM runs"
            )
            total = int(self._conn.execute(counted, kept).fetchone()[0])
        page = [dict(r) for r in rows[:limit]]
        after = int(page[-1]["seq"]) if len(rows) > limit else None
        return (
            [as_read(settled({k: v for k, v in r.items() if k != "seq"}, dead)) for r in page],
            total,
            after,
        )

    def get_run(self, run_id: str, max_points: int = 2000) -> dict[str, Any]:
        """One run with config, plan (None until the run reported one), metric points (at most
        `max_points`, spread over its steps: jobs/store_metrics.py; 0: none, for a reader of the
        rest, which then costs nothing by the run's length), validation rounds ({step, loss}) and
        outputs (a live run whose owning process is gone is marked interrupted first:
        settle_dead_owners). Raises NotFound."""
        dead = self.settle_dead_owners()
        with self._lock:
            row = self._conn.execute(
                f"SELECT {', '.join(RUN_COLUMNS)}, config_json, plan_json, warnings_json, dataset_warnings_json"
                " FROM runs WHERE id=?",
                (run_id,),
            ).fetchone()
            if row is None:
                raise NotFound(f"no run with id {run_id!r}")
            points = read_points(self._conn, run_id, max_points)
            validation = self._conn.execute(
                "SELECT step, loss FROM validation WHERE run_id=? ORDER BY step", (run_id,)
            ).fetchall()
            outputs = self._conn.execute(
                "SELECT kind, path FROM outputs WHERE run_id=? ORDER BY kind, path", (run_id,)
            ).fetchall()
        run = as_read(settled(dict(row), dead))
        run["config"] = json_read.loads(run.pop("config_json"))
        plan = run.pop("plan_json")
        run["plan"] = json_read.loads(plan) if plan else None
        run["dataset_warnings"] = warnings_list(run.pop("dataset_warnings_json"))
        run["metrics"] = points
        run["validation"] = [dict(v) for v in validation]
        run["outputs"] = [dict(o) for o in outputs]
        return run

    def metric_points(
        self, run_id: str, max_points: int = 2000, up_to: int | None = None
    ) -> list[dict[str, Any]]:
        """At most `max_points` of the run's metric points up to step `up_to` (None: all), spread
        over their steps (jobs/store_metrics.py): a resume's carried history."""
        with self._lock:
            return read_points(self._conn, run_id, max_points, up_to)

    def every_metric_point(self, run_id: str) -> Iterator[dict[str, Any]]:
        """Every metric point of the run, oldest first, a page at a time (store_metrics.every_point)."""
        return every_point(self._conn, self._lock, run_id)

    def output_order(self) -> dict[str, int]:
        """Each output name's place in the order runs were recorded, which deleting run records
        never lowers (jobs/store_schema.read_output_order): the LoRA list's newest first
        (api/routes/loras.py), never the files' mtimes, which a clock set back puts below."""
        with self._lock:
            return read_output_order(self._conn)

    def runs_with_output_name(self, output_name: str) -> list[str]:
        """Ids of the runs that wrote (or will write) to `output_name`, in the order they were
        recorded (oldest first)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT id FROM runs WHERE output_name=? ORDER BY rowid", (output_name,)
            ).fetchall()
        return [r["id"] for r in rows]

    def live_writers(self, output_name: str) -> list[dict[str, Any]]:
        """The live (queued or running) runs that write `output_name`, oldest first: {"id",
        "source", "status", "owner_pid"} each; a reader settles dead owners first
        (settle_dead_owners), else a run killed outright counts as live (`lora push`'s check)."""
        live = [s.value for s in LIVE_STATUSES]
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, source, status, owner_pid FROM runs WHERE output_name=?"
                f" AND status IN ({','.join('?' * len(live))}) ORDER BY rowid",
                (output_name, *live),
            ).fetchall()
        return [dict(r) for r in rows]

    def output_sharers(self, output_names: list[str]) -> dict[str, list[str]]:
        """{output name: the ids of its runs, oldest first} for each of `output_names` (a page's,
        in one query): a run deleted while another of the list shares its folder keeps the files."""
        with self._lock:
            return read_output_sharers(self._conn, output_names)
