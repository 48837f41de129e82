"""TrainConfig's data fields: resolution and buckets, latent cache, captions, controls, masks, validation."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from lorastudio.config_datasets import check_resolution
from lorastudio.config_fields_base import StrictFields
from lorastudio.text_rules import DefaultCaption, TriggerWord


def _zero(value: object) -> bool:
    return value == 0


LatentCacheMode = Literal["auto", "memory", "disk", "off"]


class DataFields(StrictFields):
    """How the images and captions are prepared: sizes, augmentation, caches, controls, masks, holdout."""

    # data
    resolution: int | list[int] | None = Field(
        default=None,
        description="training side in pixels, 16-4096, a multiple of the family's resolution_multiple "
        "(SDXL 32, the others 16; /api/info) and at least twice it; a list of up to 8 distinct sides ([512, 768, 1024]) trains every image at each, with "
        "the buckets of each (null: the family's default)",
    )
    aspect_buckets: bool = Field(default=True, description="batch images by aspect ratio (else square)")
    # issue 29 part 5: no enlargement of small images (data.buckets.choose_bucket)
    no_upscale: bool = Field(
        default=False,
        description="train an image smaller than its bucket at the largest bucket inside its own size "
        "instead of upscaling it",
    )
    random_crop: bool = Field(default=False, description="random instead of centre crop")
    random_flip: bool = Field(default=False, description="horizontal flip augmentation")
    cache_variants: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="crop/flip variants cached per image (default 4 with random crop, 2 with flip only, else 1; "
        "latent_cache off caches none)",
    )
    latent_cache_max_gb: float = Field(
        default=8.0,
        ge=0,
        le=1024,
        description="RAM budget of the latent cache (auto / memory); above it, the disk cache (auto) or encode "
        "per step (memory)",
    )
    # issue 31 part 6: the on-disk latent cache (data/disk_cache.py, training/inputs/latents_disk.py)
    latent_cache: LatentCacheMode = Field(
        default="auto",
        description="where VAE latents are cached: memory (RAM up to latent_cache_max_gb, else encoded "
        "per step), disk (memory-mapped shards kept across runs), auto (memory when it fits, else disk), "
        "off (encoded every step)",
    )
    trigger_word: TriggerWord | None = Field(default=None, description="prepended to captions")
    default_caption: DefaultCaption | None = Field(
        default=None, description="caption of images without one (instance prompt)"
    )
    caption_dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description="probability of an empty caption")
    # issue 29 part 3: caption augmentation (data/caption_variants.py)
    shuffle_tags: bool = Field(
        default=False, description="shuffle each caption's comma-separated tags (after the first keep_tokens)"
    )
    keep_tokens: int = Field(
        default=0,
        ge=0,
        le=100,
        description="tags at the start of a caption kept in place (the trigger word is one)",
    )
    tag_dropout: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="probability of dropping each tag after the first keep_tokens",
    )
    caption_variants: int | None = Field(
        default=None,
        ge=2,
        le=64,
        description="with shuffle_tags / tag_dropout: caption variants drawn per image and encoded once each "
        "(their text embeddings are cached; null: 8)",
    )
    control_dirs: list[str] = Field(
        default_factory=list,
        max_length=9,
        description="paired datasets: parallel folders of control images matched to the targets by file "
        "stem, folder N = control slot N after the dataset's control/, control_2/ ... sub-folders "
        "(each absolute, or a name under datasets/, like data_dir)",
    )

    # issue 27: the size controls train at (data/control_sizing.py); musubi-tuner's name
    control_resolution: Literal["pipeline", "target"] | Annotated[int, Field(ge=64, le=4096)] = Field(
        default="pipeline",
        description="paired datasets: the size each control image trains at: 'pipeline' = the size the "
        "family's edit pipeline encodes a reference at (Qwen-Image-Edit ~1 MP in its own aspect ratio, "
        "FLUX.1 Kontext its preferred resolutions, FLUX.2 capped at 1 MP), 'target' = resized to cover "
        "its target's bucket and cropped like it, or a side N = the pipeline's rule at an N x N area",
    )

    # masked loss (issue 29 part 4; data/masks.py): a dataset's masks/ folder (same file stems), or alpha
    alpha_mask: bool = Field(
        default=False,
        description="use each image's alpha channel as its loss mask (opaque = trained, transparent = "
        "unmasked_weight) instead of a masks/ folder; images without alpha train unmasked (named by the preflight)",
    )
    unmasked_weight: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="loss weight of the pixels outside an image's mask (masks/ folder of the dataset, grey = "
        "in between, or alpha_mask); 0 = they teach nothing",
    )

    # validation loss (issue 29 part 6; data/holdout.py, training/validate.py)
    validation_split: float | str | None = Field(
        default=None,
        description="images held out of training for the validation loss: a fraction of the dataset (0-1, "
        "chosen by the seed) or a folder (absolute, or a name under datasets/, as data_dir) of validation images; "
        "null = off",
    )
    validate_every: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description="with validation_split: the mean loss over the held-out images at fixed noise levels and "
        "seeds every N optimizer steps and after the last one; each round also writes the LoRA snapshot of "
        "its step, so the best one is marked and kept (null: only after the last step)",
    )
    validation_seed: int = Field(
        default=0,
        exclude_if=_zero,  # config_fields_training.LEFT_OUT_AT_DEFAULT
        ge=0,
        le=2**32 - 1,
        description="seed of the validation loss's fixed noise, apart from `seed`, so that runs of other seeds "
        "measure the same held-out images at the same noise (a fraction's held-out images are still chosen by "
        "`seed`: a validation folder holds out the same ones); a run resumed from a checkpoint of a version "
        "before it keeps the noise of its `seed`",
    )

    @field_validator("resolution")
    @classmethod
    def _resolution_sides(cls, v: int | list[int] | None) -> int | list[int] | None:
        return check_resolution(v)

    @field_validator("validation_split")
    @classmethod
    def _split_shape(cls, v: float | str | None) -> float | str | None:
        if isinstance(v, float | int) and not isinstance(v, bool) and not 0 < v < 1:
            raise ValueError("a fraction must be between 0 and 1 (exclusive); or give a folder")
        if isinstance(v, str) and not v.strip():
            raise ValueError("must be a fraction or a folder, not empty")
        return v
