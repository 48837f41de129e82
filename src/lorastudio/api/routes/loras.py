"""/api/loras: the trained LoRAs in the outputs root, with their sidecars."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import FileResponse

from lorastudio.api.deps import settings_dep
from lorastudio.api.schemas_files import LoraList
from lorastudio.jobs.generation import lora_file
from lorastudio.settings import Settings

router = APIRouter(prefix="/api/loras", tags=["loras"])


@router.get("", response_model=LoraList)
def loras(
    family: str | None = Query(default=None, description="only LoRAs of this family"),
    settings: Settings = Depends(settings_dep),
) -> dict[str, Any]:
    """Every outputs/<name>/<name>.safetensors with its <name>.json sidecar (null if missing or
    unreadable), newest first; `family` filters on the sidecar's family."""
    root = settings.outputs_dir
    found = []
    folders = (
        [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")] if root.is_dir() else []
    )
    for folder in folders:
        lora = folder / f"{folder.name}.safetensors"
        if not lora.is_file():
            continue
        sidecar = _sidecar(folder / f"{folder.name}.json")
        fam = sidecar.get("family") if sidecar else None
        if family is not None and fam != family:
            continue
        stat = lora.stat()
        found.append(
            {
                "name": folder.name,
                "family": fam,
                "path": str(lora),
                "bytes": stat.st_size,
                "modified": stat.st_mtime,
                "sidecar": sidecar,
            }
        )
    found.sort(key=lambda item: item["modified"], reverse=True)
    return {"root": str(root), "loras": found}


@router.get("/{name}/file", response_class=FileResponse)
def download(name: str, settings: Settings = Depends(settings_dep)) -> FileResponse:
    """The .safetensors file of trained LoRA `name` (404 when missing)."""
    path = lora_file(settings, name)
    return FileResponse(path, media_type="application/octet-stream", filename=path.name)


def _sidecar(path: Any) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
