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
    last_used: float = Field(
        description="when a run last used it (epoch seconds; 0 when unknown): a prune removes the oldest first"
    )


class CacheOut(_Out):
    folder: str = Field(
        description="where the cache lives (LORASTUDIO_CACHE_DIR, default <home>/cache/encoded)"
    )
    entries: list[CacheEntryOut]
    bytes: int = Field(description="all entries together")


class CacheClearedOut(_Out):
    freed_bytes: int


class CachePrunedOut(_Out):
    cap_bytes: int = Field(
        description="the cap pruned to (max_gb, else LORASTUDIO_CACHE_MAX_GB or its default)"
    )
    before_bytes: int
    after_bytes: int
    freed_bytes: int
    removed: list[CacheEntryOut] = Field(description="entries removed, least recently used first")
    in_use: list[CacheEntryOut] = Field(description="entries over the cap kept: a run reads them")
    foreign: list[CacheEntryOut] = Field(
        description="entries over the cap kept: they hold files the cache did not write"
    )
