"""/api/datasets/{name}/thumbnails|masks|alpha/{file}: JPEG thumbnails of a dataset's images,
its control images, its loss masks and its images' alpha channels (split from
api/routes/datasets.py). Decoded reduced, two at a time, and cached (data.thumbnails); files are
read without following links (data.image_edits.existing_image)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse, Response

from lorastudio.api.contract import file_answer
from lorastudio.api.dataset_lookup import dataset_dep
from lorastudio.api.deps import settings_dep
from lorastudio.api.schemas import ErrorOut
from lorastudio.data.decode_slots import DecodeBusy
from lorastudio.data.image_edits import existing_image
from lorastudio.data.masks import MASKS_DIR, file_has_alpha
from lorastudio.data.pairs import LAST_CONTROL_FOLDER
from lorastudio.data.thumbnails import TooLargeToPreview, placeholder_jpeg, thumbnail_jpeg
from lorastudio.data.upload_pairs import control_slot
from lorastudio.errors import NotFound
from lorastudio.settings import Settings

router = APIRouter(prefix="/api/datasets", tags=["datasets"])
JPEG = {
    **file_answer("image/jpeg", description="a JPEG preview"),
    503: {
        "model": ErrorOut,
        "description": "DecodeBusy: every decode slot is taken; send it again after Retry-After",
    },
}


# {file:path}: a kohya layout's image is listed as `10_sks/a.png` (data/kohya_listing.py, RELIABILITY 2201)
@router.get("/{name}/thumbnails/{file:path}", response_class=Response, responses=JPEG)
def thumbnail(
    name: str,
    file: str,
    size: int = Query(default=256, ge=16, le=1024),
    control: str | None = Query(
        default=None,
        description="a control folder (control, control_2 ...): the thumbnail of its image `file`",
    ),
    dataset: Path = Depends(dataset_dep),
    settings: Settings = Depends(settings_dep),
) -> Response:
    """A JPEG thumbnail (longest side `size`) of one dataset image, decoded at reduced size and
    cached under the studio home. A PNG/WebP larger than settings.max_decode_pixels gets a grey
    placeholder (header X-Lorastudio-Placeholder says why); 503 with Retry-After when the
    server's decode slots stay busy."""
    folder = dataset
    if control is not None:
        if control_slot(control) is None:
            raise NotFound(
                f"{control!r} is not a control folder (control, control_2 ... {LAST_CONTROL_FOLDER})"
            )
        folder = folder / control
        if folder.is_symlink():
            raise NotFound(f"no control folder {control!r} in dataset {name}")
    return _thumbnail(existing_image(folder, file), size, settings)


@router.get("/{name}/masks/{file}", response_class=Response, responses=JPEG)
def mask_thumbnail(
    name: str,
    file: str,
    size: int = Query(default=256, ge=16, le=1024),
    dataset: Path = Depends(dataset_dep),
    settings: Settings = Depends(settings_dep),
) -> Response:
    """A JPEG thumbnail of one loss mask of the dataset (masks/<file>, data/masks.py), like the
    image thumbnails. 404 when there is no such mask (or the masks folder is a link)."""
    # rendered as the mask it trains with (data.images.mask_grey: a transparent pixel black);
    # the docstring above is the API's description (web/src/api/schema.d.ts is generated from it)
    masks = dataset / MASKS_DIR
    if masks.is_symlink():
        raise NotFound(f"dataset {name!r} has no masks folder")
    return _thumbnail(existing_image(masks, file), size, settings, mask=True)


@router.get("/{name}/alpha/{file:path}", response_class=Response, responses=JPEG)
def alpha_thumbnail(
    name: str,
    file: str,
    size: int = Query(default=256, ge=16, le=1024),
    dataset: Path = Depends(dataset_dep),
    settings: Settings = Depends(settings_dep),
) -> Response:
    """A JPEG thumbnail of the alpha channel of one image of the dataset (grey, opaque = white:
    its loss mask with alpha_mask, data/masks.py), like the image thumbnails. 404 when there is
    no such image or it has no alpha channel."""
    path = existing_image(dataset, file)
    if not file_has_alpha(path):
        raise NotFound(f"{file} has no alpha channel")
    return _thumbnail(path, size, settings, alpha=True)


def _thumbnail(
    path: Path, size: int, settings: Settings, alpha: bool = False, mask: bool = False
) -> Response:
    """The thumbnail response of an image file (see `thumbnail`; `alpha`: of its alpha channel;
    `mask`: of the loss mask a masks/ file is)."""
    headers = {"Cache-Control": "no-cache"}
    try:
        data = thumbnail_jpeg(
            path,
            size,
            cache_dir=settings.thumbnail_cache_dir,
            max_pixels=settings.max_image_pixels,
            decode_pixels=settings.max_decode_pixels,
            alpha=alpha,
            mask=mask,
        )
    except TooLargeToPreview as err:
        data = placeholder_jpeg(size)
        headers["X-Lorastudio-Placeholder"] = str(err).encode("ascii", "replace").decode("ascii")
    except DecodeBusy as err:
        return JSONResponse(
            {"error": "DecodeBusy", "detail": str(err)},
            status_code=503,
            headers={"Retry-After": str(err.retry_after_s)},
        )
    except FileNotFoundError:  # deleted since it was found (its cache key stats it)
        raise NotFound(f"no image {path.name!r} in {path.parent}") from None
    return Response(data, media_type="image/jpeg", headers=headers)
