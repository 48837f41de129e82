"""/api/generate: one image from a base model + LoRAs, saved to the gallery; /gallery serves it.

POST /api/generate is the synchronous form: its answer is the image, so its connection stays
open for the whole generation. A client on this machine that leaves (Ctrl-C, its own timeout)
cancels it: nothing is kept. A request that came through a forwarding proxy (a header of
remote_access.PROXY_HEADERS) is not cancelled when its connection ends: a proxy whose read
timeout is shorter than the generation (nginx's default 60 s) cut it, and cancelling lost the
whole image, again at every retry; it now finishes into the gallery with a `note` saying its
client left (RELIABILITY 2291). What that costs a user behind a proxy who left on purpose: the
GPU until that one image is made (MAX_IN_FLIGHT bounds the queue) and an image to delete; the
cancel route (POST /api/generate/{request_id}/cancel, with the request_id sent) still stops it.
The studio cannot tell a proxy's timeout from its client's leaving: the proxy closes the
connection either way. Scripts behind a proxy should use the asynchronous form,
/api/generations (api/routes/generations.py: 202 at once, then poll), as the web UI does.

The route only routes: the request is checked and run by the GenerationService, whose worker
process holds the pipeline (no torch in the server)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from pathlib import Path as FilePath
from typing import Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from lorastudio import families, json_read
from lorastudio.api.contract import file_answer, multipart_body
from lorastudio.api.deps import generation_dep, settings_dep
from lorastudio.api.downloads import Download
from lorastudio.api.form_files import file_parts
from lorastudio.api.proxy import proxy_header
from lorastudio.api.schemas import REQUEST_ID_PATTERN, ErrorOut, GenerateBody
from lorastudio.api.schemas_files import (
    GalleryDeleted,
    GalleryImage,
    GalleryList,
    GenerateCancelOut,
    GenerateOut,
    ReferencesOut,
)
from lorastudio.data import safe_component
from lorastudio.data.writes import staged_write
from lorastudio.errors import DatasetError, NotFound, UnknownFamily
from lorastudio.jobs.gallery import CURSOR_PATTERN, delete_gallery_image, gallery_dir, gallery_page
from lorastudio.jobs.generation import GenerationService
from lorastudio.jobs.generation_inputs import GenerationRequest, LoraChoice
from lorastudio.jobs.references import (
    discard_references,
    prune_orphans,
    reference_path,
    store_reference,
)
from lorastudio.settings import Settings

CANCEL_RETRY_S = 0.05  # how often a left client's cancel is tried until its request is in flight
MAX_REFERENCES = 10  # the most any family takes (FLUX.2 dev)
REFERENCES_BODY_LIMIT = 200 * 2**20  # bytes: 10 large photos
GALLERY_PAGE = 60  # GET /api/gallery's default page: a few hundred KB of settings at most
LEFT_NOTE = (
    "its client left before the answer (POST /api/generate through a proxy, whose read timeout may"
    " have cut it): kept, not cancelled"
)

log = logging.getLogger("lorastudio.api")

router = APIRouter(tags=["generate"])


@router.post(
    "/api/generate",
    status_code=201,
    response_model=GenerateOut,
    responses={
        500: {
            "model": ErrorOut,
            "description": "the pipeline failed in the generation worker (GenerationFailed)",
        },
        503: {
            "model": ErrorOut,
            "description": "the worker was lost or the server is stopping: send it again",
        },
        504: {"model": ErrorOut, "description": "the worker hung past the allowance and was stopped"},
    },
)
async def generate(
    body: GenerateBody, request: Request, service: GenerationService = Depends(generation_dep)
) -> dict[str, Any]:
    """Generate one image; 201 with its gallery file and URL. 400 for a request over the budget
    (size, steps) or a bad LoRA file, 404 for an unknown LoRA, 409 while training runs, when
    a request of the same request_id is in flight or ended less than 10 minutes ago (a late
    cancel of that one must not stop this one), when MAX_IN_FLIGHT (8) are (one runs, the
    others wait), or when it was cancelled (the cancel route,
    or its client left, not through a proxy: it stops between denoising steps, nothing kept), 503 when the
    generation worker died (killed, out of memory), 504 when it hung past the allowance of what
    was asked (it is stopped): the next request starts a fresh one; 503 ServerStopping when the
    server began to stop (it was stopped, nothing kept), 507 NoSpaceLeft when the gallery's disk is
    full, 500 WriteFailed when its write is refused otherwise (nothing of the image kept); 500
    GenerationFailed when the pipeline failed. The answer comes when the image is made: behind a proxy
    with a shorter read timeout, POST /api/generations (202 at once, then poll) instead. If the
    proxy cuts this request (its read timeout: nginx's default is 60 s), the generation is NOT
    cancelled: it finishes into the gallery, its `note` saying its client left (GET
    /api/gallery); POST /api/generate/{request_id}/cancel stops it. A client that reaches the
    studio directly (no forwarding header) and leaves cancels it: nothing kept."""
    req = request_of(body)
    request_id = client_request_id(body) or f"unnamed-{uuid.uuid4().hex}"
    owner = object()  # this POST: its client leaving cancels its own request, never another's
    left = asyncio.Event()  # its client left (a proxied request's: kept, not cancelled)
    keep = proxy_header(request.scope) is not None
    watcher = asyncio.ensure_future(
        _cancel_when_gone(request, service, request_id, owner, left if keep else None)
    )
    try:
        result = await run_in_threadpool(service.generate, req, request_id, owner)
    finally:
        watcher.cancel()
    if left.is_set():
        result = await run_in_threadpool(_note_left, FilePath(result["path"]), result)
    return {**result, "url": f"/gallery/{result['file']}", "reference_urls": _reference_urls(result)}


def _note_left(image: FilePath, result: dict[str, Any]) -> dict[str, Any]:
    """`result` with LEFT_NOTE as its `note`, written into `image`'s sidecar (replaced whole). A
    sidecar that cannot be read or written (the image deleted meanwhile, a full disk) keeps the
    image as it is, said in the server log: its client is gone, no answer reaches anyone."""
    sidecar = image.with_suffix(".json")
    try:
        meta = json_read.loads(sidecar.read_text(encoding="utf-8"))
        meta["note"] = LEFT_NOTE
        with staged_write(sidecar) as tmp:
            tmp.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    except (OSError, ValueError) as err:
        log.warning(
            "generation kept as %s: its note could not be written to %s: %s", image.name, sidecar, err
        )
        return result
    log.info("generation %s: kept as %s with its note (its client left)", meta.get("request_id"), image.name)
    return {**result, "note": LEFT_NOTE}


def client_request_id(body: GenerateBody) -> str | None:
    """The body's request_id as the client's name for this request, or None (the server names
    it). A body with `seconds` is a gallery image's sidecar sent back as it stands: its
    request_id is the earlier render's (retired, or on /api/generations its record kept), not
    this request's, so it is read and not used (GenerateBody.seconds), as `seconds` is."""
    return None if body.seconds is not None else body.request_id


def request_of(body: GenerateBody) -> GenerationRequest:
    """The service's request of a GenerateBody (both forms: this route and /api/generations). A
    width / height left out: the family's (FamilySpec.generation_side, as `lorastudio generate`);
    steps left out stay None: the family's for the base's flavour (generate_image)."""
    side = _family_side(body.family)
    return GenerationRequest(
        family=body.family,
        base_model=body.base_model,
        revision=body.revision,
        base_config=body.base_config,
        v_prediction=body.v_prediction,
        prompt=body.prompt,
        seed=body.seed,
        steps=body.steps,
        width=side if body.width is None else body.width,
        height=side if body.height is None else body.height,
        guidance=body.guidance,
        negative_prompt=body.negative_prompt,
        max_sequence_length=body.max_sequence_length,
        control_resolution=body.control_resolution,
        loras=tuple(LoraChoice(r.name, r.scale, r.step, r.sha256, r.weights) for r in body.loras),
        references=tuple(body.references),
        base_identity=body.base_identity,
    )


def _family_side(family: str) -> int:
    """`family`'s generation side; an unknown family's 1024 (check_request refuses the family)."""
    try:
        return families.get(family).spec.generation_side
    except UnknownFamily:
        return 1024


async def _cancel_when_gone(
    request: Request,
    service: GenerationService,
    request_id: str,
    owner: object,
    left: asyncio.Event | None = None,
) -> None:
    """Cancel this POST's generation (`request_id` of `owner`) once its client disconnects (the
    body was read: the next message the server gets for this request is its disconnect). Until
    the POST ends (it cancels this watcher) the cancel is tried again: the request may not be in
    flight yet (its thread is queued), and a duplicate POST of a running id is never in flight
    as this owner's (the other client's request goes on). With `left` (a proxied request: module
    docstring) nothing is cancelled: `left` is set, and the generation goes on."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    if left is not None:
        left.set()
        log.warning(
            "generation %s: its client left (through a proxy: its read timeout?); it goes on into the"
            " gallery (POST /api/generate/%s/cancel stops it)",
            request_id,
            request_id,
        )
        return
    while True:
        with contextlib.suppress(NotFound):  # not in flight as this owner's (yet), or it ended
            service.cancel(request_id, owner)
            return
        await asyncio.sleep(CANCEL_RETRY_S)


@router.post("/api/generate/{request_id}/cancel", response_model=GenerateCancelOut)
def cancel(
    request_id: str = Path(pattern=REQUEST_ID_PATTERN),
    service: GenerationService = Depends(generation_dep),
) -> dict[str, Any]:
    """Cancel the generation of this request_id (GenerateBody.request_id): one waiting for the
    worker ends now, a running one after its current denoising step (loading: before its next
    component or LoRA, and what it loaded is freed); its POST /api/generate (409: cancelled)
    ends and nothing of it is kept. A second cancel answers the same. 404 when no such generation is in
    flight (unknown, or it ended: its id is not taken again for 10 minutes, so a late cancel
    never stops another request)."""
    return {"request_id": request_id, "was": service.cancel(request_id)}


def _reference_urls(meta: dict[str, Any]) -> list[str]:
    refs = meta.get("references")
    return [f"/gallery/references/{r}" for r in refs if isinstance(r, str)] if isinstance(refs, list) else []


@router.post(
    "/api/generate/references",
    status_code=201,
    response_model=ReferencesOut,
    max_body_size=REFERENCES_BODY_LIMIT,
    openapi_extra=multipart_body("the reference images as files, in slot order (any field names)"),
)
async def upload_references(request: Request, settings: Settings = Depends(settings_dep)) -> dict[str, Any]:
    """Upload reference images for generation with an edit family (multipart, any field names,
    in slot order): each is checked like a dataset image and kept; 201 with their ids (give
    them as GenerateBody.references) and URLs. 400 naming every refused file (then none is kept)."""
    try:
        form = await request.form(max_files=MAX_REFERENCES, max_fields=MAX_REFERENCES)
    except HTTPException as err:  # Starlette's 400 for a malformed multipart body (too many files...)
        if err.status_code != 400:  # a body over the cap (413) stays as it is
            raise
        raise DatasetError("malformed multipart upload", [str(err.detail)]) from None
    try:
        uploads = [up for _, up in file_parts(form)]
        if not uploads:
            raise DatasetError("no reference images in the upload", ["send the images as multipart files"])
        stored: list[str] = []
        problems: list[str] = []
        for up in uploads:
            try:
                stored.append(await run_in_threadpool(store_reference, settings, up.filename or "", up.file))
            except DatasetError as err:
                problems += err.problems
        if problems:  # all or nothing: the references of one request go together
            await run_in_threadpool(discard_references, settings, stored)
            raise DatasetError("reference images refused", problems)
    finally:
        await form.close()
    await run_in_threadpool(prune_orphans, settings)  # those no gallery image names, uploaded long ago
    return {"references": [{"id": r, "url": f"/gallery/references/{r}"} for r in stored]}


@router.get("/gallery/references/{ref_id}", response_class=Download, responses=file_answer("image/*"))
def reference_file(ref_id: str, settings: Settings = Depends(settings_dep)) -> Download:
    """An uploaded reference image."""
    path = reference_path(settings, ref_id)
    if path is None:
        raise NotFound(f"no reference image {ref_id!r}")
    return Download(path)


@router.get("/api/gallery", response_model=GalleryList)
def gallery(
    limit: int = Query(default=GALLERY_PAGE, ge=1, le=1000, description="images in the page"),
    cursor: str | None = Query(
        default=None,
        pattern=CURSOR_PATTERN,
        max_length=300,
        description="a page's next_cursor: the page after it (absent: the newest images)",
    ),
    settings: Settings = Depends(settings_dep),
) -> dict[str, Any]:
    """The generated images, newest first, a page at a time (`limit`; `cursor`: the previous
    page's `next_cursor`, null after the last page; an image made meanwhile is never repeated or
    makes one skipped), with their settings (prompt, seed, LoRAs, ...): of a sidecar, the fields
    that fit the listing's shape (a damaged one costs its own fields, never the listing); `total`
    counts every image. Only the page's sidecars are read, each once per file version."""
    page = gallery_page(settings, limit, cursor)
    return {
        **page,
        "images": [
            _fitting({**img, "url": f"/gallery/{img['file']}", "reference_urls": _reference_urls(img)})
            for img in page["images"]
        ],
    }


@router.delete("/api/gallery/{file}", response_model=GalleryDeleted)
def delete_gallery_file(file: str, settings: Settings = Depends(settings_dep)) -> dict[str, Any]:
    """Delete a generated image and its settings sidecar (404 when there is no such image)."""
    return {"deleted": delete_gallery_image(settings, file)}


def _fitting(entry: dict[str, Any]) -> dict[str, Any]:
    """`entry` as a GalleryImage, less the sidecar fields that do not fit it (a wrong type, a
    number JSON cannot carry)."""
    try:
        return GalleryImage.model_validate(entry).model_dump()
    except ValidationError as err:
        bad = {e["loc"][0] for e in err.errors() if e["loc"]}
        return GalleryImage.model_validate({k: v for k, v in entry.items() if k not in bad}).model_dump()


@router.get("/gallery/{file}", response_class=Download, responses=file_answer("image/png"))
def gallery_file(file: str, settings: Settings = Depends(settings_dep)) -> Download:
    """A generated image from the gallery."""
    safe_component(file, field="file")
    path = gallery_dir(settings) / file
    if path.is_symlink() or not path.is_file() or path.suffix != ".png":
        raise NotFound(f"no gallery image {file!r}")
    return Download(path, media_type="image/png")
