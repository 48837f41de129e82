"""/api/generate: one image from a base model + LoRAs, saved to the gallery; /gallery serves it.

The route only routes: the request is checked and run by the GenerationService, whose worker
process holds the pipeline (no torch in the server)."""

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
    """Generate one image; 201 with its gallery file and URL. 400 for a request over the budget
    (size, steps) or a bad LoRA file, 404 for an unknown LoRA, 409 while training runs, 503 when
    the generation worker died (killed, out of memory): the next request starts a fresh one."""
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
        negative_prompt=body.negative_prompt,
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
