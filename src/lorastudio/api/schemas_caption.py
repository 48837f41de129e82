"""API schemas of caption jobs (POST /api/datasets/{name}/caption, /api/captions/...)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# "interrupted": its record was left running by a server or CLI that died (jobs/caption_records.py)
CaptionStatus = Literal["running", "completed", "failed", "cancelled", "interrupted"]


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore")


class CaptionFailure(_Out):
    file: str
    reason: str


class CaptionPreview(_Out):
    file: str
    caption: str


class CaptionJobOut(_Out):
    id: str
    dataset: str
    model: str
    device: Literal["cpu", "cuda"]
    gpu: int | None = Field(default=None, description="the GPU index a cuda job runs on (null on the CPU)")
    beside_training: str | None = Field(
        default=None, description="the training job whose GPU this job shares (it fits beside the run)"
    )
    prefix: str | None
    prompt: str | None = Field(
        default=None,
        description="the prompt asked (null: the model's default; or a record before it was kept)",
    )
    max_tokens: int | None = Field(
        default=None, description="new tokens per caption at most (null: a record before it was kept)"
    )
    overwrite: bool
    status: CaptionStatus
    total: int | None = Field(description="images to caption (null until the worker has planned)")
    done: int = Field(description="images captioned or failed so far")
    captioned: int
    cut: int = Field(
        default=0,
        description="captions whose model text stopped at max_tokens, not at its end (written as made, "
        "likely mid-sentence: raise max_tokens); 0 in a record of a job before this count",
    )
    skipped: int = Field(description="images that keep their caption")
    kohya_kept: int = Field(
        default=0,
        description="of the skipped, images captioned only by a kohya <stem>.caption, which a run of a plain "
        "dataset does not read (rename it to .txt); 0 in a record before this count",
    )
    failed: int = Field(description="images that failed (all of them)")
    eta_s: float | None = Field(
        default=None,
        description="seconds left while it runs, from the time its images took so far since the model "
        "loaded (null before the first image is done and once it has ended)",
    )
    failures: list[CaptionFailure] = Field(
        description="the first 100 failed images by file, with the reason (each is a caption_failed event too)"
    )
    preview: list[CaptionPreview] = Field(description="the first captions written")
    error: str | None
    cancel_reason: str | None
    created_at: str
    finished_at: str | None
