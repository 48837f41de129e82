"""Response shapes of the file-library routes: datasets, trained LoRAs, generated images
(the training and run shapes are in api/schemas.py; base models in api/schemas_models.py)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from lorastudio.api.schemas import DatasetSummary, DroppedFile, LoraRef, _Out


class DatasetFile(_Out):
    file: str
    caption: str | None
    bytes: int
    width: int | None
    height: int | None


class DatasetDetail(DatasetSummary):
    files: list[DatasetFile]
    dropped: list[DroppedFile]


class DatasetList(_Out):
    root: str
    datasets: list[DatasetSummary]


class UploadOut(DatasetSummary):
    committed: list[str] = Field(description="the files stored by this upload, sorted")
    refused: list[DroppedFile] = Field(
        description="the files this upload refused, with the reason (one entry per problem)"
    )


class DatasetDeleted(_Out):
    deleted: str = Field(description="the name of the deleted dataset")


class CaptionOut(_Out):
    file: str
    caption: str | None
    caption_file: str | None


class DeletedFiles(_Out):
    deleted: list[str]


class LoraOut(_Out):
    name: str
    family: str | None
    path: str
    bytes: int
    modified: float = Field(description="modification time, seconds since the epoch")
    sidecar: dict[str, Any] | None


class LoraList(_Out):
    root: str
    loras: list[LoraOut]


class LoraStep(_Out):
    step: int | None = Field(description="optimizer step the LoRA was saved at (null: unknown)")
    path: str
    final: bool = Field(description="the run's final LoRA (else a snapshot under loras/)")
    url: str = Field(description="download URL of the file")


class LoraSteps(_Out):
    name: str
    loras: list[LoraStep] = Field(description="by step, ascending; the final LoRA last")


class GenerateOut(_Out):
    file: str
    url: str
    path: str
    seconds: float
    seed: int
    width: int
    height: int
    prompt: str
    negative_prompt: str | None = None
    guidance: float | None = Field(default=None, description="null: the family's default")
    loras: list[LoraRef]


class GalleryImage(_Out):
    file: str
    url: str
    created: float = Field(description="seconds since the epoch")
    width: int | None = None
    height: int | None = None
    prompt: str | None = None
    negative_prompt: str | None = None
    guidance: float | None = None
    seed: int | None = None
    family: str | None = None
    base_model: str | None = None
    steps: int | None = None
    loras: list[LoraRef] = Field(default_factory=list)


class GalleryList(_Out):
    images: list[GalleryImage]
