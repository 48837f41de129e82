"""/api/info: where things live, the datasets, the families and what this host can run."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool

from lorastudio import __version__, families
from lorastudio.api.deps import settings_dep
from lorastudio.api.host_wait import host_known
from lorastudio.api.schemas import InfoOut
from lorastudio.config_choices import config_rules_public
from lorastudio.config_resolve import refused_fields
from lorastudio.data.listing import list_datasets
from lorastudio.data.name_rule import new_name_rule
from lorastudio.jobs.hardware import HostInfo
from lorastudio.jobs.validation import local_models
from lorastudio.settings import Settings

router = APIRouter(prefix="/api", tags=["info"])


@router.get("/info", response_model=InfoOut)
async def info(settings: Settings = Depends(settings_dep)) -> dict[str, Any]:
    """Roots, dataset folders with image/caption counts, local base models (folders under
    models/ with their family), families (defaults + capabilities) and the host's accelerator
    and precisions, and the config rules the UI follows (config_rules; each family's `refuses`; the new
    dataset name's checks, dataset_name_rule)."""
    host = await host_known()  # the GPU probe awaited holding no request thread (api/host_wait.py)
    return await run_in_threadpool(_info, settings, host)


def _info(settings: Settings, host: HostInfo) -> dict[str, Any]:
    return {
        "version": __version__,
        "datasets_root": str(settings.datasets_dir),
        "outputs_root": str(settings.outputs_dir),
        "models_root": str(settings.models_dir),
        "datasets": list_datasets(settings.datasets_dir),
        "models": local_models(settings.models_dir),
        "families": [
            {
                **fam.spec.public(),
                "refuses": refused_fields(fam.spec.supports),
                "precisions": list(host.precisions),
            }
            for fam in families.all_families()
        ],
        "host": host.public(),
        "auth": settings.api_token is not None,
        "config_rules": config_rules_public(),
        "dataset_name_rule": new_name_rule(),
    }
