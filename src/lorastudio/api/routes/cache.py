"""/api/cache: the on-disk latent and caption cache (latent_cache = disk): list, clear and prune it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query

from lorastudio.api.deps import service_dep, settings_dep
from lorastudio.api.schemas_cache import CacheClearedOut, CacheOut, CachePrunedOut
from lorastudio.data.cache_prune import prune_to_cap
from lorastudio.data.disk_cache import cache_root, cache_stats, clear_cache
from lorastudio.errors import JobActive, NotFound
from lorastudio.jobs.service import JobService
from lorastudio.settings import Settings

router = APIRouter(prefix="/api", tags=["cache"])


@router.get("/cache", response_model=CacheOut)
def list_cache(settings: Settings = Depends(settings_dep)) -> dict[str, Any]:
    """Each (kind, encoder fingerprint) folder of the cache with its shards and bytes."""
    stats = cache_stats(cache_root(settings))
    return {
        "folder": str(cache_root(settings)),
        "entries": [vars(s) for s in stats],
        "bytes": sum(s.bytes for s in stats),
    }


@router.delete("/cache", response_model=CacheClearedOut)
def clear(
    model: str | None = Query(default=None, max_length=64, description="only this encoder fingerprint"),
    settings: Settings = Depends(settings_dep),
    service: JobService = Depends(service_dep),
) -> dict[str, Any]:
    """Remove the cache (or one model's shards). 409 while a training job is live (it may be
    reading them), 404 for an unknown model."""
    root = cache_root(settings)
    if service.datasets_in_use():
        raise JobActive("a training job is live and may read the cache; clear it when the job ends")
    if model is not None and not any(s.model == model for s in cache_stats(root)):
        raise NotFound(f"no cached model {model!r}")
    return {"freed_bytes": clear_cache(root, model=model)}


@router.post("/cache/prune", response_model=CachePrunedOut)
def prune(
    max_gb: float | None = Query(
        default=None, ge=0, le=1_000_000, description="prune to this many GB (default: the cache's cap)"
    ),
    settings: Settings = Depends(settings_dep),
) -> dict[str, Any]:
    """Remove whole entries, least recently used first, until the cache fits `max_gb` or its cap
    (LORASTUDIO_CACHE_MAX_GB; data/cache_prune.py). Entries a live run reads are kept (listed
    in in_use), so a job may be live."""
    result = prune_to_cap(settings, max_gb)
    return {
        "cap_bytes": result.cap_bytes,
        "before_bytes": result.before_bytes,
        "after_bytes": result.after_bytes,
        "freed_bytes": result.freed_bytes,
        "removed": [vars(s) for s in result.removed],
        "in_use": [vars(s) for s in result.in_use],
        "foreign": [vars(s) for s in result.foreign],
    }
