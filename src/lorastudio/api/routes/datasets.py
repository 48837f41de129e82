"""/api/datasets: list, upload into, inspect, caption (one, or in bulk) and delete dataset
images.

Every name is one safe path component under the datasets root. Edits are refused (409) while
a live (running or queued) job trains on the dataset, and while a caption job, a CLI `train` or
`datasets caption` holds it (its write claim, jobs/dataset_claims.py, taken for the writes). Files are read without following links
(data.safe_open); thumbnails: api/routes/dataset_thumbnails.py.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from starlette.formparsers import MultiPartException

from lorastudio.api.contract import multipart_body
from lorastudio.api.dataset_lookup import dataset_dep, dataset_path, listed_dataset_dep
from lorastudio.api.deps import service_dep, settings_dep
from lorastudio.api.form_files import file_parts
from lorastudio.api.schemas import (
    CaptionBody,
    RenameBody,
)
from lorastudio.api.schemas_files import (
    BulkCaptionBody,
    BulkCaptionOut,
    CaptionOut,
    DatasetDeleted,
    DatasetDetail,
    DatasetList,
    DatasetRenamed,
    DeletedFiles,
    UploadBrief,
    UploadOut,
)
from lorastudio.api.upload_spool import parser_class
from lorastudio.data import new_name, safe_component
from lorastudio.data.caption_bulk import CaptionEdit, bulk_edit_captions
from lorastudio.data.captions import one_newline_form
from lorastudio.data.dataset_delete import delete_dataset
from lorastudio.data.dataset_detail import dataset_detail
from lorastudio.data.dataset_names import hand_named_folder, rename_dataset
from lorastudio.data.image_edits import delete_image, write_caption
from lorastudio.data.listing import dataset_summary, list_datasets
from lorastudio.data.mask_upload import MASK_FIELD, upload_masks
from lorastudio.data.safe_open import FolderId, folder_identity, open_folder
from lorastudio.data.upload_pairs import control_slot, misnamed_control_field
from lorastudio.data.uploads import UploadBatch, UploadResult, UploadTooLarge
from lorastudio.errors import DatasetChanged, DatasetError, DatasetNotFound, JobActive
from lorastudio.jobs.dataset_claims import WRITE, DatasetClaim
from lorastudio.jobs.service import JobService
from lorastudio.settings import Settings

router = APIRouter(prefix="/api/datasets", tags=["datasets"])

MAX_FILES_PER_UPLOAD = 10_000
# The upload route streams its body to disk under settings.max_upload_mb (checked in the route),
# not under the app's cap on JSON bodies (settings.max_json_mb, create_app's max_body_size).
STREAMED_BODY_LIMIT = 2**62


def _editable(service: JobService, folder: Path) -> Path:
    """`folder` (a dataset's), refused (JobActive, 409) while a live training job uses it."""
    if folder in service.datasets_in_use():
        raise JobActive(f"dataset {folder.name!r} is used by a live training job; edit it when the job ends")
    return folder


@contextmanager
def _writing(settings: Settings, service: JobService, folder: Path) -> Iterator[Path]:
    """The editable dataset folder, claimed for writing while the block runs (a caption job of
    this server, or a CLI train or caption on this home, holds it: DatasetBusy, 409)."""
    with _write_claim(settings, _editable(service, folder)):
        yield folder


def _write_claim(settings: Settings, folder: Path, action: str | None = None) -> DatasetClaim:
    """A brief write claim on `folder`; its refusal says `action` ("it cannot be deleted"; None:
    "its captions cannot be written")."""
    holder = f"an edit of dataset {folder.name!r} through the lorastudio server"
    return DatasetClaim.take(
        settings.home, settings.datasets_dir, [folder], WRITE, holder, brief=True, action=action
    )


@router.get("", response_model=DatasetList)
def datasets(settings: Settings = Depends(settings_dep)) -> dict[str, Any]:
    """Every dataset folder with its image and caption counts."""
    return {"root": str(settings.datasets_dir), "datasets": list_datasets(settings.datasets_dir)}


@router.get("/{name}", response_model=DatasetDetail)
def dataset(
    name: str,
    offset: int = Query(default=0, ge=0, description="the first image of the page (by file name)"),
    limit: int = Query(default=0, ge=0, description="images in the page (0: every image from `offset` on)"),
    folder: Path = Depends(dataset_dep),
) -> dict[str, Any]:
    """The images of a dataset with their captions (txt wins over metadata.jsonl), control
    images (paired datasets: relative paths, slot order; orphan controls listed as dropped),
    upright sizes (EXIF orientation applied) and alpha flags (each file's header read once per
    version of it), a page at a time (`offset`, `limit`; the totals `images`, `captions`,
    `masked`, `with_alpha` and `total_files` count them all). Links are listed as dropped, never read; a caption file of the
    page or metadata.jsonl that cannot be used is listed as dropped with the reason
    (data/dataset_detail.py)."""
    return dataset_detail(folder, offset, limit or None)


# the listed dataset looked up first (404 DatasetNotFound before the body or a claim)
@router.delete("/{name}", response_model=DatasetDeleted, dependencies=[Depends(listed_dataset_dep)])
def remove_dataset(
    name: str,
    settings: Settings = Depends(settings_dep),
    service: JobService = Depends(service_dep),
) -> dict[str, Any]:
    """Delete a dataset folder with every file in it: 409 while a queued or running job trains
    on it, 404 when there is none. The folder is first renamed to a hidden `.deleting-<id>`
    (gone from listings at once), then removed (files its removal could not remove are logged
    and left to the next server start: the dataset is deleted)."""
    root = settings.datasets_dir
    folder = hand_named_folder(root, name) or root / safe_component(name, field="dataset name")
    with _write_claim(settings, folder, action="it cannot be deleted"):
        delete_dataset(
            settings.datasets_dir,
            name,
            in_use=service.datasets_in_use,
            decoded_dir=settings.decoded_record_dir,
        )
    return {"deleted": name}


@router.post("/{name}/rename", response_model=DatasetRenamed, dependencies=[Depends(listed_dataset_dep)])
def rename(
    name: str,
    body: RenameBody,
    settings: Settings = Depends(settings_dep),
    service: JobService = Depends(service_dep),
) -> dict[str, Any]:
    """Rename the dataset folder `name` (as listed: a folder made by hand under a name the studio
    cannot use included) to `to` (a new dataset's name rules): one atomic rename; 409 while a
    job trains on it or a caption job / CLI run holds its claim, 400 when `to` is refused or
    taken, 404 when there is no such folder."""
    root = settings.datasets_dir
    folder = hand_named_folder(root, name) or dataset_path(settings, name)
    if not folder.is_dir() or folder.is_symlink():
        raise DatasetNotFound(name)
    with _write_claim(settings, folder, action="it cannot be renamed"):
        new = rename_dataset(
            root, name, body.to, in_use=service.datasets_in_use, decoded_dir=settings.decoded_record_dir
        )
    return {"renamed": name, "name": new}


@router.post(
    "/{name}/files",
    status_code=201,
    response_model=UploadOut | UploadBrief,
    max_body_size=STREAMED_BODY_LIMIT,
    openapi_extra=multipart_body(
        "images, their .txt captions, masks (field `mask`) and control images (fields `control`, "
        "`control_2`, ...) as files; the field name `files` for the rest"
    ),
)
async def upload(
    name: str,
    request: Request,
    strict: bool = Query(default=False, description="refuse the whole upload when any file is bad"),
    summary: bool = Query(
        default=True,
        description="answer with the dataset's summary after the upload (UploadOut: its image and "
        "caption counts, which list the whole folder and stat every caption file: work linear in "
        "the dataset); false: only `name`, `committed` and `refused` (UploadBrief), for a client "
        "that sends a large dataset in many batches",
    ),
    settings: Settings = Depends(settings_dep),
    service: JobService = Depends(service_dep),
) -> dict[str, Any]:
    """Upload images, .txt captions and metadata.jsonl (multipart, any field names), and the
    control images of a paired dataset in fields named after their control folder (`control`,
    `control_2` ... `control_10`; stored there, each matching a target image by stem; a file in a
    field spelt like one, `controls`, is refused rather than stored as an image), and loss
    masks in fields named `mask` (an upload of their own; stored in masks/, each checked like
    `datasets import` checks them: an image of the dataset's image's stem and size). Every file
    is checked, then the good ones are committed at once (201, listing `committed` and
    `refused` with reasons); 400 listing every problem when nothing could be stored, or with
    `strict=true` when any file is bad. Repeated uploads accumulate. 413 above the size cap,
    400 for a body that is not multipart/form-data, 409 DatasetChanged when the dataset was
    renamed, deleted or replaced (another client) while the body was sent: nothing stored.
    The answer holds the dataset's summary after the upload unless `summary=false` (UploadBrief:
    a client sending many batches lists the dataset once, at the end)."""
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data") or "boundary=" not in content_type:
        raise DatasetError(
            "an upload must be a multipart/form-data body (files as form fields)",
            [f"Content-Type is {content_type!r}" if content_type else "no Content-Type header"],
        )
    folder = _editable(service, dataset_path(settings, name))  # a new name: this upload creates it
    if not os.path.lexists(folder):  # this upload creates the dataset: its name is a new one
        new_name(name, field="dataset name")
    # the dataset as the upload began (None: this upload makes it), its folder held open until
    # the commit: a folder deleted meanwhile keeps its inode, so a replacement never has it
    began_on, held = _hold(folder)
    try:
        cap = settings.max_upload_mb * 2**20
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > cap:
            raise UploadTooLarge(cap)
        parser = parser_class()(  # one descriptor per upload, not per file (upload_spool)
            request.headers, _capped(request.stream(), cap), max_files=MAX_FILES_PER_UPLOAD, max_fields=100
        )
        try:
            form = await parser.parse()
        except MultiPartException as err:
            raise DatasetError("malformed multipart upload", [err.message]) from None
        try:
            uploads = file_parts(form)
            result = await run_in_threadpool(_commit, settings, folder, began_on, uploads, strict)
        finally:
            await form.close()
        refused = [{"file": name, "reason": reason} for name, reason in result.refused]
    finally:
        if held is not None:
            os.close(held)
    if not summary:  # the batch's own work only (RELIABILITY 2190)
        return {"name": folder.name, "committed": result.stored, "refused": refused}
    return {**dataset_summary(folder), "committed": result.stored, "refused": refused}


def _hold(folder: Path) -> tuple[FolderId | None, int | None]:
    """The dataset folder's identity and an open descriptor of it (the caller closes it): while
    it is open the folder's inode is not reused, so `_unchanged` tells a folder deleted and made
    again under its name from the one the upload began on. (None, None) when there is none."""
    try:
        fd = open_folder(folder)
    except DatasetError:
        return None, None
    st = os.fstat(fd)
    return (st.st_dev, st.st_ino), fd


def _identity(folder: Path) -> FolderId | None:
    """The dataset folder's (device, inode); None when there is none (or a link: refused later)."""
    try:
        return folder_identity(folder)
    except DatasetError:
        return None


def _unchanged(folder: Path, began_on: FolderId | None) -> None:
    """Refuse (DatasetChanged, 409) an upload whose dataset folder was renamed, deleted or
    replaced since the upload began (`began_on`: its identity then; None: the upload makes it).
    The caller holds the folder's write claim, which a rename and a delete take: it stays so
    until the commit ends. Without this the commit made a new dataset under the old name."""
    if began_on is not None and _identity(folder) != began_on:
        raise DatasetChanged(
            f"dataset {folder.name!r} was renamed, deleted or replaced while this upload was sent "
            "(another tab or client); nothing was stored: upload again into the dataset as listed now"
        )


def _commit(
    settings: Settings, folder: Path, began_on: FolderId | None, uploads: list[Any], strict: bool
) -> UploadResult:
    masks = [(up.filename or "", up.file) for field, up in uploads if field == MASK_FIELD]
    if masks:  # loss masks into masks/ (data/mask_upload.py), in an upload of their own
        if len(masks) != len(uploads):
            raise DatasetError(
                f"upload to {folder.name} refused",
                [f"masks (fields named {MASK_FIELD!r}) go in an upload of their own, after their images"],
            )
        with _write_claim(settings, folder):
            _unchanged(folder, began_on)
            return upload_masks(
                settings.datasets_dir, folder, masks, settings.max_image_pixels, strict=strict
            )
    with _write_claim(settings, folder):
        _unchanged(folder, began_on)
        return _commit_files(settings, folder, uploads, strict)


def _commit_files(settings: Settings, folder: Path, uploads: list[Any], strict: bool) -> UploadResult:
    """Stage, check and commit the upload's images, captions and controls (data/uploads.py)."""
    with (
        UploadBatch(
            settings.datasets_dir,
            folder,
            settings.max_image_pixels,
            settings.max_decode_pixels,
            strict=strict,
            decoded_dir=settings.decoded_record_dir,
        ) as batch,
    ):
        for field, up in uploads:  # a field named control, control_2 ... holds control images
            if (misnamed := misnamed_control_field(field)) is not None:  # not a target in disguise
                batch.refuse(up.filename or "", misnamed)
            else:
                batch.add(up.filename or "", up.file, control_slot(field))
        return batch.commit()


async def _capped(stream: AsyncIterator[bytes], cap: int) -> AsyncIterator[bytes]:
    total = 0
    async for chunk in stream:
        total += len(chunk)
        if total > cap:
            raise UploadTooLarge(cap)
        yield chunk


@router.put("/{name}/captions/{file:path}", response_model=CaptionOut)  # a kohya `10_sks/a.png` too
def put_caption(
    name: str,
    file: str,
    body: CaptionBody,
    dataset: Path = Depends(dataset_dep),
    settings: Settings = Depends(settings_dep),
    service: JobService = Depends(service_dep),
) -> dict[str, Any]:
    """Set (or, when empty, remove) the .txt caption of one image; with `expected`, 409 when
    the caption changed since the editor read it (the current one in the body)."""
    with _writing(settings, service, dataset) as folder:
        path = write_caption(folder, file, body.caption, body.expected)
    return {
        "file": file,
        "caption": one_newline_form(body.caption).strip() or None,  # as written (CR LF as LF)
        "caption_file": path.name if path else None,
    }


@router.post("/{name}/captions", response_model=BulkCaptionOut)
def bulk_captions(
    name: str,
    body: BulkCaptionBody,
    dataset: Path = Depends(dataset_dep),
    settings: Settings = Depends(settings_dep),
    service: JobService = Depends(service_dep),
) -> dict[str, Any]:
    """Find / replace, prepend and append over every caption of the dataset (data/caption_bulk.py:
    all or nothing, each file staged and renamed); `dry_run` counts and shows, writes nothing."""
    edit = CaptionEdit(find=body.find, replace=body.replace, prepend=body.prepend, append=body.append)
    if body.dry_run:  # reads only
        result = bulk_edit_captions(_editable(service, dataset), edit, dry_run=True)
    else:
        with _writing(settings, service, dataset) as folder:
            result = bulk_edit_captions(folder, edit, dry_run=False)
    return {
        "changed": len(result.changed),
        "captions": result.captions,
        "files": result.changed,
        "examples": [{"file": f, "before": b, "after": a} for f, b, a in result.examples],
        "written": result.written,
    }


@router.delete("/{name}/images/{file:path}", response_model=DeletedFiles)  # a kohya `10_sks/a.png` too
def remove_image(
    name: str,
    file: str,
    dataset: Path = Depends(dataset_dep),
    settings: Settings = Depends(settings_dep),
    service: JobService = Depends(service_dep),
) -> dict[str, Any]:
    """Delete one image with its .txt caption, control images and mask (each kept while another
    image of that stem uses it)."""
    with _writing(settings, service, dataset) as folder:
        return {"deleted": delete_image(folder, file)}
