"""`lorastudio runs list|show ID`: the run store, read directly (works with or without a server;
a CLI run whose process is gone is read as interrupted: RunStore.settle_dead_owners)."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from lorastudio.cli.json_out import JsonCommand, json_errors, print_json
from lorastudio.cli.tables import print_table

T = TypeVar("T")

runs_app = typer.Typer(
    help="Training runs recorded in the run store.", no_args_is_help=True, rich_markup_mode=None
)


def register(app: typer.Typer) -> None:
    app.add_typer(runs_app, name="runs")


def _read(action: Callable[[Any], T]) -> T:
    """`action(store)` on the run store opened read-side (never marks runs interrupted: a server
    may be live), closed after. Raises StoreUnreadable naming the file when SQLite cannot open or
    read it (a traceback before), NotFound from the action."""
    from lorastudio.settings import get_settings

    return store_action(get_settings().db_path, action)


def store_action(path: Path, action: Callable[[Any], T]) -> T:
    """`_read`'s `action(store)` on the run store at `path` (`lora push`'s live-run check)."""
    from lorastudio.errors import StoreUnreadable
    from lorastudio.jobs.persist import STORE_ERRORS
    from lorastudio.jobs.store import RunStore

    try:
        store = RunStore.open(path, recover=False)
        try:
            return action(store)
        finally:
            store.close()
    except STORE_ERRORS as err:
        raise StoreUnreadable(f"cannot read the run database {path}: {err}") from None


def local_time(stamp: str) -> str:
    """A record's stamp (UTC, ISO 8601 with its offset: jobs/records.now_iso) as the user's local
    date and time to the second, "YYYY-MM-DD HH:MM:SS" (TZ's; as `cache ls`, the logs and a run's
    default name show theirs): the list showed the UTC stamp cut of its offset, hours off a
    local clock with nothing saying so. A stamp without an offset or not a date: as it is, to
    the second."""
    try:
        when = datetime.datetime.fromisoformat(stamp)
    except ValueError:
        return stamp[:19]
    return when.astimezone().strftime("%Y-%m-%d %H:%M:%S") if when.tzinfo is not None else stamp[:19]


@runs_app.command("list")
def list_cmd(limit: int = typer.Option(50, "--limit", min=1, help="at most this many, newest first")) -> None:
    """List runs, newest first: the server's (source service) and `lorastudio train`'s (source cli);
    when the store holds more than `limit`, a last line (on stderr) says how many were left out."""
    runs, total, _ = _read(lambda store: store.runs_page(limit))
    if not runs:
        typer.echo("no runs yet")
        return
    rows = []
    for r in runs:
        loss = f"{r['last_loss']:.4f}" if r["last_loss"] is not None else "-"
        steps = f"{r['steps_run']}/{r['total_steps'] or '?'}"
        row = [
            r["id"],
            r["status"],
            r["source"],
            r["family"],
            r["output_name"],
            steps,
            loss,
            local_time(r["created_at"]),
        ]
        rows.append(row)
    headers = ("id", "status", "source", "family", "output", "steps", "last loss", "created")
    print_table(headers, rows, keep=("id", "output"))
    if total > len(runs):  # never a silent cut: README once said "every run" of this list
        typer.echo(
            f"{len(runs)} of {total} runs shown, newest first: --limit {total} lists them all", err=True
        )


@runs_app.command("show", cls=JsonCommand)
def show_cmd(
    run_id: str = typer.Argument(..., help="the run id (see `lorastudio runs list`)"),
    as_json: bool = typer.Option(False, "--json", help="print the whole record as JSON"),
) -> None:
    """Show one run: status, config, outputs, error, the last metric points and the validation
    rounds (the lowest loss marked best)."""
    with json_errors(as_json):  # with --json, an error is JSON on stdout too
        run = _read(lambda store: store.get_run(run_id))
    if as_json:
        print_json(run)
        return
    for key in (
        "id",
        "status",
        "source",
        "family",
        "output_name",
        "created_at",
        "started_at",
        "finished_at",
        "error",
    ):
        typer.echo(f"{key:12} {run[key] if run[key] is not None else '-'}")
    typer.echo(f"{'steps':12} {run['steps_run']}/{run['total_steps'] or '?'}")
    for warning in run.get("warnings") or []:
        typer.echo(f"{'warning':12} {warning}")
    for warning in run.get("dataset_warnings") or []:  # the scan's, the captions cut (RELIABILITY 913)
        typer.echo(f"{'dataset':12} {warning}")
    if resume := _resume_line(run):
        typer.echo(f"{'resume':12} {resume}")
    for out in run["outputs"]:
        typer.echo(f"{'output':12} {out['kind']}: {out['path']}")
    for point in run["metrics"][-5:]:
        typer.echo(f"{'':12} step {point['step']}: loss {point['loss']}")
    for line in _validation_lines(run.get("validation") or []):
        typer.echo(f"{'validation':12} {line}")
    typer.echo("config:")
    for key, value in run["config"].items():
        typer.echo(f"  {key} = {value}")


@runs_app.command("metrics")
def metrics_cmd(run_id: str = typer.Argument(..., help="the run id (see `lorastudio runs list`)")) -> None:
    """Every metric point the run stored, as CSV on stdout: a header, then one row a step (step,
    epoch, loss, avg_loss, lr, grad_norm, samples_per_second, peak_memory_gb; empty where not
    measured), the whole series that `runs show` and GET /api/runs/{id} spread over at most 2,000
    points. pandas.read_csv reads it; `> run.csv` keeps it. A resumed run's record holds the
    history it carried over as the run page showed it (2,000 points at most), then every step."""
    import csv
    import sys

    from lorastudio.jobs.records import METRIC_KEYS

    unwritten: list[OSError] = []

    def write(store: Any) -> None:
        store.get_run(run_id, max_points=0)  # NotFound, naming the id
        out = csv.writer(sys.stdout, lineterminator="\n")
        try:
            out.writerow(METRIC_KEYS)
            for point in store.every_metric_point(run_id):  # the store's failures: sqlite3's
                out.writerow("" if point[key] is None else point[key] for key in METRIC_KEYS)
        except OSError as err:  # stdout's (`| head`: a closed pipe), not "cannot read the run database"
            unwritten.append(err)

    _read(write)
    if unwritten:
        raise unwritten[0]  # the console program's answer (cli/app.py: a closed pipe ends quietly)


def _validation_lines(rounds: list[dict]) -> list[str]:
    """One line per stored validation round (the newest 10), the lowest loss marked "(best)"."""
    losses = [r["loss"] for r in rounds if isinstance(r.get("loss"), (int, float))]
    best = min(losses) if losses else None
    return [
        f"step {r['step']}: loss {r['loss']:.5g}{' (best)' if r['loss'] == best else ''}"
        if isinstance(r.get("loss"), (int, float))
        else f"step {r['step']}: no loss"
        for r in rounds[-10:]
    ]


def _resume_line(run: dict) -> str | None:
    """How to continue a run that ended early (interrupted, stopped, failed) from its newest
    checkpoint; None when it is live or its folder offers no resume (jobs/resume.resume_points)."""
    from lorastudio.jobs.records import LIVE_STATUSES
    from lorastudio.jobs.resume import resume_points
    from lorastudio.settings import get_settings

    if run["status"] in {s.value for s in LIVE_STATUSES} or not run["output_name"]:
        return None
    folder = get_settings().outputs_dir / run["output_name"]
    step = resume_points(folder).resume_step
    return None if step is None else f"from step {step}: lorastudio train --resume {folder}"
