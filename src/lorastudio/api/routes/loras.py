"""/api/loras: the trained LoRAs in the outputs root, with their sidecars and their pickable
files (with EMA: the EMA LoRA and the raw one, each with its validation marks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query

from lorastudio.api.contract import file_answer
from lorastudio.api.deps import service_dep, settings_dep, store_dep
from lorastudio.api.downloads import Download
from lorastudio.api.lora_pages import CURSOR, find_loras, page_of, read_sidecar
from lorastudio.api.schemas import ErrorOut
from lorastudio.api.schemas_files import LoraList, LoraSteps, PushBody, PushOut
from lorastudio.data.paths import safe_component
from lorastudio.errors import JobActive, NotFound
from lorastudio.jobs.generation_inputs import lora_download
from lorastudio.jobs.service import JobService
from lorastudio.jobs.store import RunStore
from lorastudio.lora.snapshots import file_weights, final_loras, raw_lora_at, run_loras
from lorastudio.settings import Settings
from lorastudio.training.validation_file import mark_loras, read_validation

router = APIRouter(prefix="/api/loras", tags=["loras"])


@router.get("", response_model=LoraList)
def loras(
    family: str | None = Query(default=None, description="only LoRAs of this family"),
    q: str | None = Query(
        default=None, max_length=255, description="only LoRAs whose name holds this text (any case)"
    ),
    name: list[str] | None = Query(default=None, description="only the LoRAs of these names (repeat it)"),
    limit: int = Query(default=200, ge=1, le=10_000, description="LoRAs in the page"),
    cursor: str | None = Query(
        default=None,
        pattern=CURSOR,
        description="a page's next_cursor: the page after it (absent: the newest LoRAs)",
    ),
    settings: Settings = Depends(settings_dep),
    store: RunStore = Depends(store_dep),
) -> dict[str, Any]:
    """Every outputs/<name>/<name>.safetensors with its <name>.json sidecar (null if missing or
    unreadable) and its pickable files (`final_files`), newest first: the runs' by the order the
    run store recorded their newest run (RunStore.output_order, as the runs list), then the
    folders no run recorded (copied in by hand, a deleted record's) by the file's mtime; `family`
    filters on the sidecar's family, `q` on the name, `name` picks names. A page at a time
    (`limit`; `cursor`: the previous page's `next_cursor`, null after the last page; a LoRA made
    or deleted meanwhile skips none and repeats none, a run record deleted meanwhile moves none); `total` counts every LoRA the filters keep. Only the page's LoRAs are read in full (api/lora_pages.py)."""
    return lora_list(settings, store, family=family, query=q, names=name, limit=limit, cursor=cursor)


def lora_list(
    settings: Settings,
    store: RunStore,
    *,
    family: str | None = None,
    query: str | None = None,
    names: list[str] | None = None,
    limit: int = 200,
    cursor: str | None = None,
) -> dict[str, Any]:
    """The LoraList answer of GET /api/loras (see `loras`). A page's LoRA whose run is deleted
    while the page is read (its final files gone) is left out of it."""
    root = settings.outputs_dir
    found = find_loras(root, store.output_order(), family=family, query=query or None, names=names)
    page, after = page_of(found, limit, cursor)
    items = []
    for f in page:
        name = f.folder.name
        sidecar = f.sidecar if family is not None else read_sidecar(f.folder / f"{name}.json")
        files = final_files(f.folder)
        if not files:  # deleted since the scan found it
            continue
        weights = file_weights(sidecar)
        items.append(
            {
                "name": name,
                "family": sidecar.get("family") if sidecar else None,
                "path": str(f.folder / f"{name}.safetensors"),
                "bytes": f.stat_size,
                "modified": f.mtime,
                "sidecar": sidecar,
                "weights": weights,
                "raw_step": _raw_step(f.folder, sidecar) if weights == "ema" else None,
                "files": files,
            }
        )
    return {"root": str(root), "loras": items, "total": len(found), "next_cursor": after}


@router.get("/{name}/steps", response_model=LoraSteps)
def steps(name: str, settings: Settings = Depends(settings_dep)) -> dict[str, Any]:
    """The LoRAs of run output `name` by step: its snapshots (every checkpoint and every
    save_lora_every steps, under loras/) and its final LoRA. 404 when the run has none."""
    return lora_steps(settings, name)


@router.get("/{name}/file", response_class=Download, responses=file_answer("application/octet-stream"))
def download(
    name: str,
    step: int | None = Query(
        default=None,
        ge=0,
        description="the raw weights of this step: a snapshot, or an EMA run's <name>.raw.safetensors "
        "(default: the run's LoRA, with EMA the EMA weights)",
    ),
    weights: Literal["raw", "ema"] | None = Query(
        default=None,
        description='with `step`: "ema" for the EMA weights of that step (the file an EMA run\'s checkpoint '
        "keeps); null or raw: the raw weights",
    ),
    settings: Settings = Depends(settings_dep),
) -> Download:
    """The .safetensors file of trained LoRA `name` (with EMA: the EMA weights), or the raw
    weights of `step`: its snapshot, or with EMA <name>.raw.safetensors for the final step; with
    `weights` "ema" the EMA weights of `step` (jobs/generation_inputs.lora_download: named as the studio named the file; 404 when missing)."""
    # named as the studio named the file, never after a link's target (lora_download)
    path, filename = lora_download(settings, name, step, weights)
    return Download(path, media_type="application/octet-stream", filename=filename)


@router.get("/{name}/sidecar", response_class=Download, responses=file_answer("application/json"))
def download_sidecar(name: str, settings: Settings = Depends(settings_dep)) -> Download:
    """The sidecar JSON beside run output `name`'s LoRA (`<name>.json`: the resolved config, the
    dataset fingerprint, the steps reached, the loader checks), as the file the run wrote, so a
    LoRA downloaded from the server keeps its record. 404 when the LoRA or its sidecar is missing."""
    # RELIABILITY 1783: the run page and /file gave the .safetensors alone
    lora_download(settings, name, None, None)  # the name checked, the LoRA there (else 404)
    name = safe_component(name)
    sidecar = settings.outputs_dir / name / f"{name}.json"  # beside the run's LoRA, as the run wrote it
    if sidecar.is_symlink() or not sidecar.is_file():
        raise NotFound(f"LoRA {name!r} has no sidecar: {sidecar} is missing")
    return Download(sidecar, media_type="application/json", filename=f"{name}.json")


@router.post(
    "/{name}/push",
    status_code=201,
    response_model=PushOut,
    responses={
        403: {
            "model": ErrorOut,
            "description": "the hub refused the token or gave it no write access (HubAccessDenied)",
        },
        502: {"model": ErrorOut, "description": "the hub failed or could not be reached (HubUploadError)"},
    },
)
def push(
    name: str,
    body: PushBody,
    settings: Settings = Depends(settings_dep),
    service: JobService = Depends(service_dep),
) -> dict[str, Any]:
    """Upload trained LoRA `name` with its sidecar, a model card and its newest samples to hub
    repo `body.repo`, with the studio's hub token (lora/hub_push.py). 201 with the commit; 400 no
    hub token set; 403 the hub refused the token or gave it no write access; 404 no such LoRA,
    or no such repo without `create`; 409 a live job writes the run (a resume rewrites its LoRA
    and sidecar: the push read one version of each); 502 the hub failed."""
    from lorastudio.lora.hub_push import push_lora

    safe_component(name, field="name")
    if (writer := service.writer_of(name)) is not None:  # RELIABILITY 1923
        raise JobActive(
            f"training job {writer} writes {name!r} now (its LoRA and sidecar): push it when it ends"
        )
    result = push_lora(settings, name, body.repo, create=body.create, private=body.private)
    return {"repo_id": result.repo_id, "url": result.url, "commit": result.commit, "files": result.files}


def lora_steps(settings: Settings, name: str) -> dict[str, Any]:
    """{"name", "loras": [{"step", "path", "final", "weights", "url", "validation_loss", "best",
    "last"}]} of
    run output `name` (see steps; the validation marks: training/validation_file.py).
    Raises NotFound (also for a name that is not a plain folder name of the outputs root)."""
    safe_component(name, field="loras.name")
    run_dir = settings.outputs_dir / name
    found = mark_loras(run_loras(run_dir), read_validation(run_dir)) if run_dir.is_dir() else []
    if not found:
        raise NotFound(f"no LoRA of a run named {name!r} in {settings.outputs_dir}")
    for item in found:
        by_step = not item["final"] or (
            item["weights"] == "raw" and Path(item["path"]).name != f"{name}.safetensors"
        )
        query = f"?step={item['step']}" if by_step else ""
        if by_step and item["weights"] == "ema":  # the EMA file a checkpoint keeps
            query += "&weights=ema"
        item["url"] = f"/api/loras/{name}/file{query}"
    return {"name": name, "loras": found}


def final_files(run_dir: Path) -> list[dict[str, Any]]:
    """The run's final files as LoraFileOut rows, the run's LoRA first, then with EMA its
    <name>.raw.safetensors: each with the LoraRef.step that picks it (null: the run's LoRA) and its
    validation marks (training/validation_file.mark_loras: only raw weights are measured)."""
    name = run_dir.name
    rows = mark_loras(final_loras(run_dir), read_validation(run_dir))  # a row's marks are its own
    files = []
    for row in reversed(rows):  # run_loras: the raw file, then the run's LoRA
        path = Path(row["path"])
        main = path.name == f"{name}.safetensors"
        try:
            size = path.stat().st_size
        except OSError:  # removed since it was listed
            continue
        files.append(
            {
                "weights": row["weights"],
                "step": None if main else row["step"],
                "trained_steps": row["step"],
                "bytes": size,
                "url": f"/api/loras/{name}/file" + ("" if main else f"?step={row['step']}"),
                "validation_loss": row["validation_loss"],
                "best": row["best"],
                "last": row["last"],
            }
        )
    return files


def _raw_step(folder: Path, sidecar: dict[str, Any] | None) -> int | None:
    """An EMA LoRA's step when the raw weights of that step are on disk (downloaded and generated
    with `step`), else None."""
    step = (sidecar or {}).get("steps")
    return step if isinstance(step, int) and raw_lora_at(folder, step) is not None else None
