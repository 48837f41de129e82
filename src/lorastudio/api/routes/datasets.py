"""/api/datasets: list, upload into, inspect, caption, thumbnail and delete dataset images.

Every name is one safe path component under the datasets root. Edits are refused (409) while
a live (running or queued) job trains on the dataset.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from PIL import Image
from starlette.formparsers import MultiPartException, MultiPartParser

from lorastudio.api.deps import service_dep, settings_dep
from lorastudio.api.schemas import (
    CaptionBody,
)
from lorastudio.api.schemas_files import CaptionOut, DatasetDetail, DatasetList, DeletedFiles, UploadOut
from lorastudio.data import resolve_dataset_dir, safe_component
from lorastudio.data.captions import read_metadata, read_sidecar
from lorastudio.data.discovery import discover
from lorastudio.data.images import ALLOWED_FORMATS, load_rgb, probe_image
from lorastudio.data.uploads import (
    UploadBatch,
    UploadTooLarge,
    dataset_summary,
    delete_image,
    existing_image,
    list_datasets,
    write_caption,
)
from lorastudio.errors import DatasetError, JobActive, NotFound
from lorastudio.jobs.service import JobService
from lorastudio.settings import Settings

router = APIRouter(prefix="/api/datasets", tags=["datasets"])

MAX_FILES_PER_UPLOAD = 10_000
# The upload route streams its body to disk under settings.max_upload_mb (checked in the route),
# not under the app's cap on JSON bodies (settings.max_json_mb, create_app's max_body_size).
STREAMED_BODY_LIMIT = 2**62


def dataset_path(settings: Settings, name: str) -> Path:
    """The dataset folder `name` (one safe component) inside the datasets root."""
    safe_component(name, field="dataset name")
    return resolve_dataset_dir(name, settings.datasets_dir, allow_outside_root=False)


def _editable(settings: Settings, service: JobService, name: str) -> Path:
    folder = dataset_path(settings, name)
    if folder in service.datasets_in_use():
        raise JobActive(f"dataset {name!r} is used by a live training job; edit it when the job ends")
    return folder


@router.get("", response_model=DatasetList)
def datasets(settings: Settings = Depends(settings_dep)) -> dict[str, Any]:
    """Every dataset folder with its image and caption counts."""
    return {"root": str(settings.datasets_dir), "datasets": list_datasets(settings.datasets_dir)}


@router.get("/{name}", response_model=DatasetDetail)
def dataset(name: str, settings: Settings = Depends(settings_dep)) -> dict[str, Any]:
    """The images of a dataset with their captions (txt wins over metadata.jsonl) and sizes."""
    folder = dataset_path(settings, name)
    if not folder.is_dir():
        raise NotFound(f"no dataset named {name!r}")
    files = discover(folder)
    rows = read_metadata(files.metadata).captions if files.metadata else {}
    images = []
    for path in files.images:
        sidecar = files.sidecars.get(path.stem)
        caption = read_sidecar(sidecar) if sidecar else rows.get(path.name)
        images.append({"file": path.name, "caption": caption, "bytes": path.stat().st_size, **_size(path)})
    return {
        **dataset_summary(folder),
        "files": images,
        "dropped": [{"file": n, "reason": r} for n, r in files.dropped],
    }


def _size(path: Path) -> dict[str, int | None]:
    try:
        with Image.open(path, formats=ALLOWED_FORMATS) as img:
            return {"width": img.width, "height": img.height}
    except (OSError, ValueError, Image.DecompressionBombError):
        return {"width": None, "height": None}


@router.post("/{name}/files", status_code=201, response_model=UploadOut, max_body_size=STREAMED_BODY_LIMIT)
async def upload(
    name: str,
    request: Request,
    settings: Settings = Depends(settings_dep),
    service: JobService = Depends(service_dep),
) -> dict[str, Any]:
    """Upload images, .txt captions and metadata.jsonl (multipart, any field names). Checked
    completely, then committed at once; repeated uploads accumulate. 413 above the size cap, 400
    for a body that is not multipart/form-data."""
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data") or "boundary=" not in content_type:
        raise DatasetError(
            "an upload must be a multipart/form-data body (files as form fields)",
            [f"Content-Type is {content_type!r}" if content_type else "no Content-Type header"],
        )
    folder = _editable(settings, service, name)
    cap = settings.max_upload_mb * 2**20
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > cap:
        raise UploadTooLarge(cap)
    parser = MultiPartParser(
        request.headers, _capped(request.stream(), cap), max_files=MAX_FILES_PER_UPLOAD, max_fields=100
    )
    try:
        form = await parser.parse()
    except MultiPartException as err:
        raise DatasetError("malformed multipart upload", [err.message]) from None
    try:
        uploads = [v for _, v in form.multi_items() if not isinstance(v, str)]
        committed = await run_in_threadpool(_commit, settings, folder, uploads)
    finally:
        await form.close()
    return {**dataset_summary(folder), "committed": committed}


def _commit(settings: Settings, folder: Path, uploads: list[Any]) -> list[str]:
    with UploadBatch(settings.datasets_dir, folder, settings.max_image_pixels) as batch:
        for up in uploads:
            batch.add(up.filename or "", up.file)
        return batch.commit()


async def _capped(stream: AsyncIterator[bytes], cap: int) -> AsyncIterator[bytes]:
    total = 0
    async for chunk in stream:
        total += len(chunk)
        if total > cap:
            raise UploadTooLarge(cap)
        yield chunk


@router.get("/{name}/thumbnails/{file}", response_class=Response)
def thumbnail(
    name: str,
    file: str,
    size: int = Query(default=256, ge=16, le=1024),
    settings: Settings = Depends(settings_dep),
) -> Response:
    """A JPEG thumbnail (longest side `size`) of one dataset image."""
    path = existing_image(dataset_path(settings, name), file)
    probe_image(path, settings.max_image_pixels)
    img = load_rgb(path)
    img.thumbnail((size, size))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=85)
    return Response(buf.getvalue(), media_type="image/jpeg", headers={"Cache-Control": "no-cache"})


@router.put("/{name}/captions/{file}", response_model=CaptionOut)
def put_caption(
    name: str,
    file: str,
    body: CaptionBody,
    settings: Settings = Depends(settings_dep),
    service: JobService = Depends(service_dep),
) -> dict[str, Any]:
    """Set (or, when empty, remove) the .txt caption of one image."""
    path = write_caption(_editable(settings, service, name), file, body.caption)
    return {
        "file": file,
        "caption": body.caption.strip() or None,
        "caption_file": path.name if path else None,
    }


@router.delete("/{name}/images/{file}", response_model=DeletedFiles)
def remove_image(
    name: str,
    file: str,
    settings: Settings = Depends(settings_dep),
    service: JobService = Depends(service_dep),
) -> dict[str, Any]:
    """Delete one image and its .txt caption."""
    return {"deleted": delete_image(_editable(settings, service, name), file)}
