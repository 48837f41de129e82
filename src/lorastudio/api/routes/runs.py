"""/api/runs: the run store (every run, this server's life and before), its checkpoints, and
resuming a run from one."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from lorastudio.api.contract import file_answer
from lorastudio.api.deps import service_dep, settings_dep, store_dep
from lorastudio.api.downloads import Download
from lorastudio.api.host_wait import HOST_KNOWN
from lorastudio.api.routes.loras import lora_steps
from lorastudio.api.sample_pages import CURSOR as SAMPLES_CURSOR
from lorastudio.api.sample_pages import DEFAULT_ROUNDS, page_rounds
from lorastudio.api.schemas import ResumeBody
from lorastudio.api.schemas_files import LoraSteps
from lorastudio.api.schemas_runs import CheckpointList, JobOut, RunDeleted, RunDetail, RunList, SampleList
from lorastudio.errors import NotFound
from lorastudio.jobs.records import LIVE_STATUSES
from lorastudio.jobs.resume import ResumePoints, resume_points
from lorastudio.jobs.service import JobService
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings
from lorastudio.training.resume.checkpoint import checkpoint_step, list_checkpoints
from lorastudio.training.sample_files import list_references, list_samples, sample_path
from lorastudio.training.sample_source import sample_sources

router = APIRouter(prefix="/api/runs", tags=["runs"])
RUNS_CURSOR = r"^[0-9]{1,19}$"  # the store's order of a page's last run (RunStore.runs_page)


@router.get("", response_model=RunList)
def list_runs(
    limit: int = Query(default=200, ge=1, le=10_000, description="runs in the page"),
    cursor: str | None = Query(
        default=None,
        pattern=RUNS_CURSOR,
        description="a page's next_cursor: the page after it (absent: the newest runs)",
    ),
    q: str | None = Query(
        default=None,
        max_length=255,
        description="only runs whose name, id or base_model holds each word of this text (any case)",
    ),
    store: RunStore = Depends(store_dep),
    settings: Settings = Depends(settings_dep),
    service: JobService = Depends(service_dep),
) -> dict:
    """Runs, newest first (no configs or metrics), each with the step it could resume from, a
    page at a time (`limit`; `cursor`: the previous page's `next_cursor`, null after the last
    page; a run made or deleted meanwhile never repeats or skips one); `total` counts every
    run, or with `q` every run it keeps (jobs/run_search.py: the words of `q` in the run's
    name, id or base_model; a cursor pages the matches). Only the page's run folders are read."""
    runs, total, after = store.runs_page(limit, int(cursor) if cursor else None, q)
    sharers = store.output_sharers([run["output_name"] for run in runs])
    return {
        "runs": [_with_resume_step(_shared(_elapsed(run, service), sharers), settings) for run in runs],
        "total": total,
        "next_cursor": None if after is None else str(after),
    }


@router.get("/{run_id}", response_model=RunDetail)
def get_run(
    run_id: str,
    store: RunStore = Depends(store_dep),
    settings: Settings = Depends(settings_dep),
    service: JobService = Depends(service_dep),
) -> dict[str, Any]:
    """One run: config, metric points (decimated), outputs, error, and the other records of its
    output folder (`shared_with`: deleting this one keeps the files). 404 when unknown."""
    run = store.get_run(run_id)
    return _with_resume_step(
        _shared(_elapsed(run, service), store.output_sharers([run["output_name"]])), settings
    )


@router.get("/{run_id}/checkpoints", response_model=CheckpointList)
def run_checkpoints(
    run_id: str, store: RunStore = Depends(store_dep), settings: Settings = Depends(settings_dep)
) -> dict[str, Any]:
    """The checkpoints in the run's output folder (shared by every session of the run). 404
    when the run is unknown."""
    run = _with_resume_step(store.get_run(run_id, max_points=0), settings)
    found = list_checkpoints(settings.outputs_dir / run["output_name"]) if run["output_name"] else []
    return {
        "checkpoints": [{"name": p.name, "step": checkpoint_step(p), "path": str(p)} for p in found],
        "resume_step": run["resume_step"],
    }


@router.get("/{run_id}/loras", response_model=LoraSteps)
def run_loras(
    run_id: str, store: RunStore = Depends(store_dep), settings: Settings = Depends(settings_dep)
) -> dict[str, Any]:
    """The run's LoRAs by step (snapshots, then the final LoRA; see /api/loras/{name}/steps).
    404 when the run is unknown or has no LoRA yet."""
    run = store.get_run(run_id, max_points=0)
    if not run["output_name"]:
        raise NotFound(f"run {run_id} has no output folder")
    return lora_steps(settings, run["output_name"])


@router.get("/{run_id}/samples", response_model=SampleList)
def run_samples(
    run_id: str,
    store: RunStore = Depends(store_dep),
    settings: Settings = Depends(settings_dep),
    # Annotated: a direct call (run_samples(id, store, settings)) gets these defaults, not Query objects
    limit: Annotated[
        int, Query(ge=1, le=10_000, description="sample rounds (steps) in the page")
    ] = DEFAULT_ROUNDS,
    cursor: Annotated[
        str | None,
        Query(
            pattern=SAMPLES_CURSOR,
            description="a page's next_cursor: the older rounds after it (absent: the newest rounds)",
        ),
    ] = None,
    step: Annotated[int | None, Query(ge=0, description="only the round of this step")] = None,
) -> dict[str, Any]:
    """The sample previews in the run's output folder (shared by every session of the run), a page
    of rounds at a time: the newest `limit` rounds (below `cursor`: the previous page's
    `next_cursor`, null after the oldest round; `step`: that round only), listed oldest step first,
    each with its prompt and URL, and what renders it again: its settings and the LoRA file
    holding the weights it shows, or why none does (training/sample_source.py). `total` counts the
    rounds. 404 when the run is unknown (api/sample_pages.py)."""
    run = store.get_run(run_id, max_points=0)
    config = run["config"] if isinstance(run["config"], dict) else {}
    prompts = [_prompt_of(p) for p in config.get("sample_prompts") or []]
    run_dir = settings.outputs_dir / run["output_name"] if run["output_name"] else None
    found, total, after = page_rounds(
        list_samples(run_dir) if run_dir else [], limit, int(cursor) if cursor else None, step
    )
    refs = list_references(run_dir) if run_dir else {}
    sources = sample_sources(config, run_dir, [(f.step, f.index, bool(refs.get(f.index))) for f in found])
    return {
        "samples": [
            {
                "step": f.step,
                "index": f.index,
                "prompt": prompts[f.index] if f.index < len(prompts) else None,
                "name": f.name,
                "url": f"/api/runs/{run_id}/samples/{f.name}",
                "references": [f"/api/runs/{run_id}/samples/{n}" for n in refs.get(f.index, [])],
                **source,
            }
            for f, source in zip(found, sources, strict=True)
        ],
        "total": total,
        "next_cursor": None if after is None else str(after),
    }


def _prompt_of(entry: Any) -> str | None:
    """The text of a stored sample_prompts entry: a prompt, or {"prompt", "controls"}."""
    if isinstance(entry, dict):
        entry = entry.get("prompt")
    return entry if isinstance(entry, str) else None


@router.get("/{run_id}/samples/{name}", response_class=Download, responses=file_answer("image/png"))
def sample_file(
    run_id: str, name: str, store: RunStore = Depends(store_dep), settings: Settings = Depends(settings_dep)
) -> Download:
    """One sample PNG of the run. Only a regular file named step-NNNNNN-I.png directly in the
    run's samples/ folder is served; anything else is 404."""
    output_name = store.get_run(run_id, max_points=0)["output_name"]
    path = sample_path(settings.outputs_dir / output_name, name) if output_name else None
    if path is None:
        raise NotFound(f"run {run_id} has no sample {name!r}")
    return Download(path, media_type="image/png")


@router.post("/{run_id}/resume", status_code=201, response_model=JobOut, dependencies=HOST_KNOWN)
def resume_run(run_id: str, body: ResumeBody, service: JobService = Depends(service_dep)) -> dict[str, Any]:
    """Continue a stopped, failed or interrupted run in its output folder from a checkpoint
    (the newest by default). 201 with the new job; 400 listing every problem (each setting
    that differs from the checkpoint's identity); 404 when the run or checkpoint is unknown;
    409 when the run is live or the GPU busy and `queue` is false."""
    return service.submit_resume(
        run_id, checkpoint=body.checkpoint, overrides=body.settings, queue=body.queue
    )


def _elapsed(run: dict[str, Any], service: JobService) -> dict[str, Any]:
    """The run with its elapsed_s while live: the service's job's so far (its monotonic clock),
    None for another's (a CLI run) or a stored one of an earlier session (a resume's)."""
    if run["status"] not in {s.value for s in LIVE_STATUSES}:
        return run
    try:
        elapsed = service.job(run["id"]).get("elapsed_s")
    except NotFound:
        elapsed = None
    return {**run, "elapsed_s": elapsed}


def _shared(run: dict[str, Any], sharers: dict[str, list[str]]) -> dict[str, Any]:
    """The run with `shared_with`: the other records of its output folder (RunStore.output_sharers)."""
    ids = sharers.get(run["output_name"] or "", [])
    return {**run, "shared_with": [i for i in ids if i != run["id"]]}


def _with_resume_step(run: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The run with what its folder offers: resume_step, train_longer (jobs/resume.py) and lora_file."""
    live = run["status"] in {s.value for s in LIVE_STATUSES}
    name = run.get("output_name")
    points = ResumePoints() if live or not name else resume_points(settings.outputs_dir / name)
    longer = None
    if points.extend_from is not None and points.total_steps is not None:
        longer = {"from_step": points.extend_from, "steps": points.total_steps}
    lora = bool(name) and (settings.outputs_dir / name / f"{name}.safetensors").is_file()
    return {**run, "resume_step": points.resume_step, "train_longer": longer, "lora_file": lora}


@router.delete("/{run_id}", response_model=RunDeleted)
def delete_run(
    run_id: str,
    keep_files: bool = Query(default=False, description="keep the run's output folder"),
    service: JobService = Depends(service_dep),
) -> dict[str, Any]:
    """Delete a finished run's record, its log and (unless keep_files, or another run shares it)
    its output folder. 409 while the run is live, 404 when unknown."""
    return service.delete_run(run_id, keep_files=keep_files)
