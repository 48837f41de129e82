"""/api/config/import: another trainer's config file as Train form settings (no torch)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from lorastudio.api.schemas_config_import import ConfigImportBody, ConfigImportOut

router = APIRouter(prefix="/api/config", tags=["config"])


@router.post("/import", response_model=ConfigImportOut)
def import_config(body: ConfigImportBody) -> dict[str, Any]:
    """Read an ai-toolkit, kohya sd-scripts / musubi-tuner, SimpleTuner or OneTrainer config (its
    text) and answer the lorastudio settings it maps to, with a report of every one of its
    settings: carried, changed in meaning (how) or not carried (why). Nothing on the server's disk
    is read for it (the files it names, its relative paths: each reported as not carried) and
    nothing is written. 400 naming the file and key: a file that is not UTF-8, not a table, an
    alias bomb, a format not detected (the candidates named), a family or base model it does not
    name."""
    from lorastudio.config_import import import_upload

    result = import_upload(body.name, body.text.encode("utf-8"), body.trainer, body.family, body.base_model)
    return {
        "trainer": result.kind,
        "config": result.settings,
        "report": [line.as_json() for line in result.lines],
        "toml": result.text,
    }
