"""/api/generate: one image from a base model + LoRAs, saved to the gallery; /gallery serves it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import FileResponse

from lorastudio.api.deps import generation_dep, settings_dep
from lorastudio.api.schemas import GenerateBody
from lorastudio.api.schemas_files import GalleryList, GenerateOut
from lorastudio.data import safe_component
from lorastudio.errors import NotFound
from lorastudio.jobs.generation import (
    GenerationRequest,
    GenerationService,
    LoraChoice,
    gallery_dir,
    gallery_images,
)
from lorastudio.settings import Settings

router = APIRouter(tags=["generate"])


@router.post("/api/generate", status_code=201, response_model=GenerateOut)
def generate(body: GenerateBody, service: GenerationService = Depends(generation_dep)) -> dict[str, Any]:
    """Generate one image; 201 with its gallery file and URL. 409 while training runs."""
    req = GenerationRequest(
        family=body.family,
        base_model=body.base_model,
        revision=body.revision,
        prompt=body.prompt,
        seed=body.seed,
        steps=body.steps,
        width=body.width,
        height=body.height,
        guidance=body.guidance,
        loras=tuple(LoraChoice(r.name, r.scale, r.step) for r in body.loras),
    )
    result = service.generate(req)
    return {**result, "url": f"/gallery/{result['file']}"}


@router.get("/api/gallery", response_model=GalleryList)
def gallery(settings: Settings = Depends(settings_dep)) -> dict[str, Any]:
    """The generated images, newest first, with their settings (prompt, seed, LoRAs, ...)."""
    return {"images": [{**img, "url": f"/gallery/{img['file']}"} for img in gallery_images(settings)]}


@router.get("/gallery/{file}", response_class=FileResponse)
def gallery_file(file: str, settings: Settings = Depends(settings_dep)) -> FileResponse:
    """A generated image from the gallery."""
    safe_component(file, field="file")
    path = gallery_dir(settings) / file
    if path.is_symlink() or not path.is_file() or path.suffix != ".png":
        raise NotFound(f"no gallery image {file!r}")
    return FileResponse(path, media_type="image/png")
