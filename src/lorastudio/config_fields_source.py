"""TrainConfig's fields of what to train on: the family, the base model and the dataset folders.

Also the hub-revision rules every place that takes a revision shares: its shape
(`revision_problem`) and what it may apply to (`local_revision_problem`, `local_revision_message`:
a revision names a version of a hub repository, so one given with a local folder or file
cannot be honoured and is refused, for base models and captioners, in TrainConfig, the caption
options of the API and CLI, and by the resolvers (basemodels/resolve.resolve_base,
captioning/source.resolve_captioner) for what only the disk can tell).
"""

from __future__ import annotations

import re

from pydantic import Field, ValidationInfo, field_validator

from lorastudio.config_datasets import MAX_DATASET_ENTRIES, DatasetEntry
from lorastudio.config_fields_base import StrictFields
from lorastudio.config_preservation import Preservation

# A hub revision (branch, tag or commit): the one rule of every place that takes one (training
# config, generate, model fetch; see revision_problem).
REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")


def revision_problem(revision: str) -> str | None:
    """Why `revision` is not a hub branch, tag or commit name (None when it is one)."""
    if not REVISION.fullmatch(revision) or ".." in revision:
        return f"{revision[:80]!r} is not a branch, tag or commit"
    return None


HUB_CATALOGUE_PREFIX = "hub:"  # a catalogue id of the hub cache (hub:owner--name): a hub id


def looks_local(model: str) -> bool:
    """True when `model` can only name something on disk: a path (absolute, "~", "./") or a
    bare name (a folder under models/; a hub id is owner/name). An owner/name may still be a
    folder under models/: the resolvers tell that from the disk."""
    if model.startswith(HUB_CATALOGUE_PREFIX):
        return False
    return model.startswith(("/", "~", ".")) or "/" not in model.strip("/")


def local_revision_message(field: str, model: str) -> str:
    """The refusal of a revision given with `field` = `model`, a local folder or file."""
    return (
        f"a revision names a version of a hub repository; {field} {model[:200]!r} is a local folder"
        " or file, which has none (it would be ignored): remove revision, or give the hub id (owner/name)"
    )


def local_revision_problem(
    model: str, revision: str | None, base_config: str | None = None, *, field: str = "base_model"
) -> str | None:
    """Why `revision` cannot apply to `model` (None when it may): `model` is local (looks_local)
    and, for a single-file checkpoint, whose configs come from `base_config` (None: the file's
    original hub id, which a revision applies to), that base_config is local too."""
    if revision is None or not looks_local(model):
        return None
    from lorastudio.basemodels.layout import weight_suffix  # a single-file checkpoint's name

    if weight_suffix(model) is not None:
        if base_config is None or not looks_local(base_config):
            return None  # the revision applies to the base config's hub id
        return local_revision_message("base_config", base_config)
    return local_revision_message(field, model)


class SourceFields(StrictFields):
    """What to train on: family, base model (and its revision / config), datasets, output name."""

    # what to train on
    family: str = Field(description="model family: a registered name (`lorastudio families`, /api/info)")
    base_model: str = Field(
        min_length=1,
        description="hub id (owner/name), local pipeline folder, or single-file checkpoint (.safetensors)",
    )
    revision: str | None = Field(
        default=None,
        description="hub revision (branch, tag or commit) of a hub id base_model (or of a single file's "
        "base_config); refused with a local folder, which has none",
    )
    base_config: str | None = Field(
        default=None,
        min_length=1,
        description="single-file base_model (.safetensors): the pipeline folder or hub id whose configs, "
        "tokenizers, scheduler and missing components (FLUX.1 / Chroma: text encoders and VAE) are used; "
        "default: the original model's hub id (e.g. stabilityai/stable-diffusion-xl-base-1.0)",
    )
    v_prediction: bool | None = Field(
        default=None,
        description="SDXL single-file checkpoint: train and sample it as v-prediction (true) or epsilon "
        "(false); unset: as the file says (its v_pred key), else the base config's scheduler",
    )
    data_dir: str | None = Field(
        default=None,
        min_length=1,
        description="dataset folder (a name under datasets/, or an absolute path: anywhere for the CLI, inside "
        "datasets/ for the server): shorthand for one datasets entry",
    )
    # issue 29 part 1: several folders, each with its own sampling and captions (config_datasets.py)
    datasets: list[DatasetEntry] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_DATASET_ENTRIES,
        description="several dataset folders, each {path, repeats | weight, trigger_word, default_caption, "
        "caption_dropout, resolution, shuffle_tags, keep_tokens, tag_dropout, loss_weight, regularisation, "
        "prior_prediction}; instead of data_dir",
    )
    prior_loss_weight: float = Field(
        default=1.0,
        gt=0,
        le=100,
        description="multiplies the loss of the samples of regularisation entries (datasets entries with "
        "regularisation = true; kohya's prior_loss_weight)",
    )
    preservation: Preservation | None = Field(
        default=None,
        description="differential output preservation, {class_word, weight, prompts}: the LoRA's output on "
        "the captions with the trigger word replaced by class_word (or on prompts) is pulled to the base "
        "model's (the LoRA disabled), computed in the same step (one extra no-grad forward and one extra "
        "forward + backward per micro-batch)",
    )
    kohya_folders: bool = Field(
        default=False,
        description="each dataset folder holds kohya <repeats>_<words> sub-folders: each one is an entry "
        "(repeats from the number, trigger word and default caption from the words)",
    )
    output_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="name of the run's output folder and LoRA file (default: family-date-time)",
    )

    @field_validator("revision")
    @classmethod
    def _revision_shape(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and (problem := revision_problem(v)):
            raise ValueError(problem)
        # a local folder has no revision (reported with the other field problems; a single
        # file's local base_config, declared after this field: config_rules.combination_problems)
        base_model = info.data.get("base_model")
        if isinstance(base_model, str) and (problem := local_revision_problem(base_model, v)):
            raise ValueError(problem)
        return v
