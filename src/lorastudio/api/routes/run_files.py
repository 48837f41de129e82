"""/api/runs/{id}/config and /api/runs/{id}/log: a run's resolved config as a file (JSON or TOML,
ready for `lorastudio train` or the Train form), and the tail of its worker's own lines."""

from __future__ import annotations

import json
from typing import Any, Literal

import tomlkit
from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from lorastudio.api.deps import settings_dep, store_dep
from lorastudio.api.schemas_runs import RunLog
from lorastudio.config import TrainConfig
from lorastudio.jobs.store import RunStore
from lorastudio.jobs.worker_log import log_disk_problem, log_path, read_tail
from lorastudio.settings import Settings

router = APIRouter(prefix="/api/runs", tags=["runs"])

MAX_LOG_LINES = 5000


@router.get(
    "/{run_id}/config",
    response_class=Response,
    responses={200: {"content": {"application/json": {}, "application/toml": {}}}},
)
def run_config(
    run_id: str,
    format: Literal["json", "toml"] = Query(default="json", description="json or toml"),
    download: bool = Query(default=True, description="served as an attachment (<output_name>.<format>)"),
    store: RunStore = Depends(store_dep),
) -> Response:
    """The resolved config the run was started with, as a file `lorastudio train` takes. TOML
    has no null: a null setting is left out (it then takes its default), and one whose null means
    "off" where the default is on is named in a comment at the top (the JSON file keeps it). 404
    when the run is unknown."""
    run = store.get_run(run_id, max_points=0)
    config: dict[str, Any] = run["config"]
    name = run["output_name"] or run_id
    if format == "json":
        body, media = json.dumps(config, indent=2) + "\n", "application/json"
    else:
        body, media = config_toml(config), "application/toml"
    headers = {"Content-Disposition": f'attachment; filename="{name}.{format}"'} if download else {}
    return Response(body, media_type=media, headers=headers)


def config_toml(config: dict[str, Any]) -> str:
    """`config` as a TOML document: null settings left out; those whose null differs from the
    default named in a leading comment."""
    doc = tomlkit.document()
    lost = [
        key
        for key, value in config.items()
        if value is None
        and key in TrainConfig.model_fields
        and TrainConfig.model_fields[key].default is not None
    ]
    if lost:
        doc.add(
            tomlkit.comment(f"off in this run (null), which TOML cannot write: {', '.join(sorted(lost))}")
        )
        doc.add(tomlkit.comment("the JSON download keeps them; here they would take their defaults"))
    for key, value in config.items():
        if value is not None:
            doc.add(key, _without_nulls(value))
    return tomlkit.dumps(doc)


def _without_nulls(value: Any) -> Any:
    """`value` with the null keys of its nested tables left out (a datasets entry's or a sample
    prompt object's unset settings, whose default is null: the run's own)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


@router.get("/{run_id}/log", response_model=RunLog)
def run_log(
    run_id: str,
    lines: int = Query(default=500, ge=1, le=MAX_LOG_LINES, description="how many of the last lines"),
    store: RunStore = Depends(store_dep),
    settings: Settings = Depends(settings_dep),
) -> dict[str, Any]:
    """The last `lines` lines of the run's worker log (its stdout, stderr and log records; a
    line per engine event), reading at most 1 MiB from the end. A CLI run has none here (its
    lines went to its terminal). 404 when the run is unknown."""
    run = store.get_run(run_id, max_points=0)
    path = log_path(settings, run_id)
    tail = read_tail(path, lines)
    note = None
    full = log_disk_problem(path.parent) if run["source"] != "cli" else None
    if full is not None:  # its writes are dropped there (the run goes on): say so, not "no log"
        note = (
            f"{'no log recorded for this run' if not tail.size_bytes else 'this log may end early'}:"
            f" the disk of {path.parent} is {full}, so the run's lines go to the server's terminal only;"
            " free space there"
        )
    elif not tail.size_bytes:
        note = (
            "a run started with `lorastudio train` prints its lines to its terminal"
            if run["source"] == "cli"
            else "no log recorded for this run yet"
        )
    return {"lines": tail.lines, "truncated": tail.truncated, "size_bytes": tail.size_bytes, "note": note}
