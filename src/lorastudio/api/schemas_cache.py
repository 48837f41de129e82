"""Response models of /api/cache (the on-disk latent and caption cache, data/disk_cache.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore")


class CacheEntryOut(_Out):
    kind: str = Field(description="latents (VAE posteriors) | text (caption embeddings)")
    model: str = Field(
        description="the encoder's content fingerprint (one per base model's VAE / text encoders)"
    )
    files: int
    bytes: int


class CacheOut(_Out):
    folder: str = Field(
        description="where the cache lives (LORASTUDIO_CACHE_DIR, default <home>/cache/encoded)"
    )
    entries: list[CacheEntryOut]
    bytes: int = Field(description="all entries together")


class CacheClearedOut(_Out):
    freed_bytes: int
