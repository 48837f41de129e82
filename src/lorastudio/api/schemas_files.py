"""Response shapes of the file-library routes: datasets, trained LoRAs, generated images
(the training and run shapes are in api/schemas_runs.py; base models in api/schemas_models.py)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from lorastudio.api.schemas import DatasetSummary, DroppedFile, LoraRef, _Body, _Out


class DatasetFile(_Out):
    file: str = Field(
        description="its file name; a kohya layout read in place (kohya N_words folders, no image at the top "
        "level) names each image `<folder>/<name>`, as its thumbnail and caption routes take it"
    )
    caption: str | None
    controls: list[str] = Field(
        default_factory=list,
        description="its control images (paired datasets): paths in the dataset, slot order",
    )
    bytes: int
    width: int | None
    height: int | None
    mask: str | None = Field(
        default=None,
        description="its loss mask in the dataset's masks/ folder (null: none); served as a thumbnail",
    )
    alpha: bool = Field(
        default=False,
        description="it has an alpha channel (its loss mask with alpha_mask); served as a thumbnail at "
        "/api/datasets/{name}/alpha/{file}",
    )
    markup: str | None = Field(
        default=None,
        description="why its caption would train another trainer's markup as text ({trigger}-like "
        "placeholders, kohya's |||), completing 'the caption ...': a fresh run refuses the dataset "
        "until it is edited (null: none)",
    )
    repeats: int | None = Field(
        default=None,
        description="a kohya layout's image: its folder's repeats N (`10_sks`: 10), as a run with "
        "kohya_folders reads it; null in any other dataset",
    )


class DatasetDetail(DatasetSummary):
    masked: int = Field(description="images with a loss mask in masks/ (all pages)")
    with_alpha: int = Field(description="images with an alpha channel (all pages)")
    total_files: int = Field(description="images listed over all pages")
    offset: int = Field(description="the first image of this page")
    limit: int | None = Field(description="the page's size asked for (null: to the end)")
    files: list[DatasetFile] = Field(description="this page's images, by file name")
    dropped: list[DroppedFile]


class DatasetList(_Out):
    root: str
    datasets: list[DatasetSummary]


class UploadBrief(_Out):
    """The answer of an upload asked with `summary=false`: what it stored and refused, not the
    dataset's counts (those cost a listing of the whole folder, RELIABILITY 2190)."""

    name: str = Field(description="the dataset's name")
    committed: list[str] = Field(description="the files stored by this upload, sorted")
    refused: list[DroppedFile] = Field(
        description="the files this upload refused, with the reason (one entry per problem)"
    )


class UploadOut(DatasetSummary):
    """The answer of an upload (`summary=true`, the default): the dataset's summary after it,
    with what it stored and refused."""

    committed: list[str] = Field(description="the files stored by this upload, sorted")
    refused: list[DroppedFile] = Field(
        description="the files this upload refused, with the reason (one entry per problem)"
    )


class DatasetDeleted(_Out):
    deleted: str = Field(description="the name of the deleted dataset")


class DatasetRenamed(_Out):
    renamed: str = Field(description="the folder's name before")
    name: str = Field(description="its new name (NFC)")


class CaptionOut(_Out):
    file: str
    caption: str | None
    caption_file: str | None


class BulkCaptionBody(_Body):
    find: str = Field(
        default="", max_length=2000, description="text to replace (plain text, every occurrence)"
    )
    replace: str = Field(default="", max_length=2000, description="what replaces find")
    prepend: str = Field(default="", max_length=2000, description="put in front of every caption, as typed")
    append: str = Field(default="", max_length=2000, description="put at the end of every caption, as typed")
    dry_run: bool = Field(default=False, description="count and show the changes, write nothing")


class BulkCaptionExample(_Out):
    file: str
    before: str
    after: str


class BulkCaptionOut(_Out):
    changed: int = Field(description="captions changed (written unless dry_run)")
    captions: int = Field(description="captions looked at (images without one are left without)")
    files: list[str] = Field(description="the images whose caption changed")
    examples: list[BulkCaptionExample]
    written: bool


class DeletedFiles(_Out):
    deleted: list[str]


class LoraFileOut(_Out):
    """One pickable file of a trained LoRA: the run's LoRA (with EMA the EMA weights) or, for a
    run with EMA, its <name>.raw.safetensors (the raw weights validation measured)."""

    weights: Literal["ema", "raw"] = Field(
        description="the EMA of the adapter weights or the raw trained ones"
    )
    step: int | None = Field(
        description="the LoraRef.step that picks this file for generation and download "
        "(null: the run's LoRA, <name>.safetensors)"
    )
    trained_steps: int | None = Field(description="optimizer step the file was saved at (null: unknown)")
    bytes: int
    url: str = Field(description="download URL of the file")
    validation_loss: float | None = Field(
        default=None, description="the validation loss of its step (null: not validated, or EMA weights)"
    )
    best: bool = Field(default=False, description="the file measured in the run's best validation round")
    last: bool = Field(default=False, description="the file measured in the run's last validation round")


class LoraOut(_Out):
    name: str
    family: str | None
    path: str
    bytes: int
    modified: float = Field(description="modification time, seconds since the epoch")
    sidecar: dict[str, Any] | None
    weights: Literal["ema", "raw"] = Field(
        description="what the file holds: the EMA of the adapter weights (ema_decay) or the raw trained ones"
    )
    raw_step: int | None = Field(
        default=None,
        description="an EMA LoRA: the step whose raw weights (the ones validation measured) are "
        "downloaded and generated with `step` (null: not an EMA LoRA, or no raw file)",
    )
    files: list[LoraFileOut] = Field(
        default_factory=list,
        description="the run's final files, each pickable: the LoRA first, then with EMA the raw one",
    )


class LoraList(_Out):
    root: str
    loras: list[LoraOut] = Field(description="the page, newest first")
    total: int = Field(description="the LoRAs the filters keep (family, q, name), every page's")
    next_cursor: str | None = Field(
        description="give it as `cursor` for the next page; null after the last page"
    )


class LoraStep(_Out):
    step: int | None = Field(description="optimizer step the LoRA was saved at (null: unknown)")
    path: str
    final: bool = Field(
        description="a file of the run's end (the LoRA, or with EMA its <name>.raw.safetensors), else a snapshot under "
        "loras/ or (weights ema) the EMA weights a checkpoint keeps (checkpoints/step-N/<name>-step-N.ema.safetensors)"
    )
    weights: Literal["ema", "raw"] = Field(
        description="what the file holds: the EMA of the adapter weights or the raw trained ones "
        "(snapshots: raw); validation measures the raw ones, so an EMA file has no loss nor mark"
    )
    url: str = Field(description="download URL of the file")
    validation_loss: float | None = Field(
        default=None, description="the validation loss of its step (null: the step was not validated)"
    )
    best: bool = Field(default=False, description="the file measured in the run's best validation round")
    last: bool = Field(default=False, description="the file measured in the run's last validation round")


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
    revision: str | None = Field(default=None, description="the hub revision, when one was given")
    v_prediction: bool | None = Field(default=None, description="a single SDXL file's, when one was given")
    base_identity: str | None = Field(
        default=None,
        description="the base model's content identity (send it again: GenerateBody.base_identity)",
    )
    negative_prompt: str | None = None
    guidance: float | None = Field(default=None, description="null: the family's default")
    max_sequence_length: int | None = Field(default=None, description="null: the pipeline's default (512)")
    control_resolution: str | int | None = Field(
        default=None, description="the run's control_resolution its references were sized by (null: fitted)"
    )
    loras: list[LoraRef]
    references: list[str] = Field(default_factory=list, description="ids of the reference images used")
    reference_urls: list[str] = Field(
        default_factory=list, description="where the reference images are served"
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="what the user should know of how the image was made, each naming its file: a DoRA "
        "LoRA whose header names no dora_scale rule, read by ComfyUI's (empty: nothing to say)",
    )


class GalleryImage(_Out):
    file: str
    url: str
    created: float = Field(description="seconds since the epoch")
    width: int | None = None
    height: int | None = None
    prompt: str | None = None
    negative_prompt: str | None = None
    guidance: float | None = Field(default=None, allow_inf_nan=False)
    max_sequence_length: int | None = Field(
        default=None, description="text tokens the prompt was read to (null: the pipeline's default, 512)"
    )
    control_resolution: str | int | None = Field(
        default=None,
        description="the run's control_resolution its references were sized by (null: fitted to the output "
        "size); GenerateBody.control_resolution",
    )
    seed: int | None = None
    family: str | None = None
    base_model: str | None = None
    base_config: str | None = Field(default=None, description="a single-file base_model's base config")
    revision: str | None = Field(default=None, description="the hub revision, when one was given")
    v_prediction: bool | None = Field(default=None, description="a single SDXL file's, when one was given")
    base_identity: str | None = Field(
        default=None,
        description="the base model's content identity (null: an image from before it was recorded); "
        "GenerateBody.base_identity",
    )
    steps: int | None = None
    loras: list[LoraRef] = Field(default_factory=list)
    references: list[str] = Field(default_factory=list, description="ids of the reference images used")
    reference_urls: list[str] = Field(
        default_factory=list, description="where the reference images are served"
    )


class GalleryList(_Out):
    images: list[GalleryImage] = Field(description="the page, newest first")
    total: int = Field(description="the images in the gallery")
    next_cursor: str | None = Field(
        description="give it as `cursor` for the next page; null after the last page"
    )


class GalleryDeleted(_Out):
    deleted: list[str] = Field(description="the files removed: the image, then its settings sidecar")


class PushBody(_Body):
    repo: str = Field(
        pattern=r"^[A-Za-z0-9][\w.-]*/[\w.-]+$", max_length=200, description="hub model repo id, owner/name"
    )
    create: bool = Field(default=False, description="create the repo first when it does not exist")
    private: bool = Field(default=False, description="with create: make the new repo private")


class PushOut(_Out):
    repo_id: str
    url: str = Field(description="the repo's page on the hub")
    commit: str | None = Field(description="the commit the push made")
    files: list[str] = Field(description="the files of the commit (LoRA, sidecar, README.md, samples/...)")


class ReferenceOut(_Out):
    id: str = Field(description="give it in GenerateBody.references")
    url: str


class GenerateCancelOut(_Out):
    request_id: str
    was: Literal["waiting", "running"] = Field(
        description="waiting for the worker (it ends now) or running (it stops after its current "
        "denoising step); its POST /api/generate answers 409, and nothing is kept in the gallery"
    )


class ReferencesOut(_Out):
    references: list[ReferenceOut] = Field(description="the uploaded reference images, in upload order")
