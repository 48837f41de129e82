"""Request bodies and response shapes of /api/models (the base-model catalogue and fetches)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FetchBody(_Body):
    repo_id: str = Field(min_length=3, max_length=200, description="hub model id, owner/name")
    revision: str | None = Field(default=None, max_length=200, description="branch, tag or commit")
    token: SecretStr | None = Field(
        default=None,
        max_length=400,
        description="a hub token for this fetch only (a gated repo the studio's token cannot read); never stored",
    )


class AddFolderBody(_Body):
    path: str = Field(
        min_length=1,
        max_length=4096,
        description="absolute path of a folder or .safetensors checkpoint to list",
    )


class CatalogueModelOut(_Out):
    id: str = Field(description="catalogue id (URL-safe): a models/ folder name, added:..., hub:...")
    name: str = Field(description="display name: folder name, or the hub id")
    source: Literal["local", "hub-cache", "tiny", "added", "catalogue"] = Field(
        description="catalogue: a known captioner not on disk yet (fetch it by its repo_id)"
    )
    path: str = Field(
        description="absolute folder or checkpoint file; usable as base_model ('' when not on disk)"
    )
    family: str | None = Field(description="the family that trains this pipeline; null when none does")
    trainable: bool = Field(description="a family trains it and every component needed is present")
    reason: str | None = Field(description="why it is not trainable (null when trainable)")
    size_bytes: int
    complete: bool = Field(description="every component folder and its weights are present")
    missing: list[str] = Field(description="what training needs and the folder lacks")
    deletable: bool = Field(description="lorastudio downloaded or created it (DELETE allowed)")
    checkpoint: str | None = Field(
        default=None,
        description="a known checkpoint: its title and note (e.g. Qwen-Image-2512 trains as qwen-image)",
    )
    distilled: bool | None = Field(
        default=None, description="step-distilled (turbo) base, from the checkpoint; null when unknown"
    )
    kind: Literal["pipeline", "single-file", "captioner"] = Field(
        default="pipeline",
        description="a diffusers pipeline folder, one .safetensors checkpoint (trained with base_config),"
        " or a captioning model (datasets caption; never trainable)",
    )
    repo_id: str | None = Field(default=None, description="a captioner's hub id (what a fetch takes)")
    licence: str | None = Field(default=None, description="a known captioner's licence")


FetchStatus = Literal["running", "completed", "failed", "cancelled"]


class FetchOut(_Out):
    id: str
    repo_id: str
    revision: str | None
    status: FetchStatus
    commit: str | None
    family: str | None
    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int
    model_id: str | None = Field(description="catalogue id of the fetched model, once completed")
    path: str | None
    error: str | None
    resumable: bool = Field(description="files so far are kept: fetching again continues")
    already_present: bool
    offline: bool = Field(description="HF_HUB_OFFLINE: only what was on disk was used")
    created_at: str
    finished_at: str | None


class FetchList(_Out):
    fetches: list[FetchOut]
    offline: bool = Field(description="the hub client is in offline mode (HF_HUB_OFFLINE)")


class ModelDeleted(_Out):
    deleted: str
    path: str


class FolderForgotten(_Out):
    forgotten: str
    path: str
