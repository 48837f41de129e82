"""Recognise what a folder holds and vet it as a training base.

`inspect_folder` never raises for what it finds: it says which family the pipeline belongs to
(from model_index.json's `_class_name`), whether lorastudio can train it, why not, and what is
missing. `vet_pipeline_folder` is the one check that the training start path (jobs.validation)
and the engine's preflight both run: it raises ModelSourceError with the reason and what IS
accepted.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lorastudio.basemodels.accepted import (
    KNOWN_UNTRAINABLE,
    accepted_family,
    accepted_text,
    family_of_pipeline,
)
from lorastudio.basemodels.agreement import config_disagreements
from lorastudio.basemodels.checkpoints import KnownCheckpoint, checkpoint_facts
from lorastudio.basemodels.jsonfile import read_json
from lorastudio.basemodels.layout import (
    MODEL_INDEX,
    inference_only_formats,
    pipeline_missing,
    weight_suffix,
)
from lorastudio.errors import ModelSourceError


@dataclass(frozen=True)
class Recognition:
    """What a folder holds. `pipeline_class` is model_index.json's `_class_name` (None when the
    folder is no pipeline); `family` the registered family that trains it (None when none does);
    `trainable` = a family trains it and nothing is missing; `reason` says why not (None when
    trainable); `missing` lists what training needs and the folder lacks."""

    family: str | None
    pipeline_class: str | None
    trainable: bool
    reason: str | None
    complete: bool
    missing: tuple[str, ...]
    # a known checkpoint (basemodels/checkpoints.py): "Qwen-Image-2512: <note>"; None when unlisted
    checkpoint: str | None = None
    distilled: bool | None = None  # step-distilled (turbo); None when nothing says
    # components of another model, by their config.json against the family's config rules and
    # their safetensors headers against their config (basemodels/agreement.py, weight_shapes.py):
    # one message per component, each naming it; () when they agree
    foreign: tuple[str, ...] = ()


def read_model_index(folder: Path) -> dict[str, Any]:
    """The parsed model_index.json of `folder`. Raises ModelSourceError when the folder has none,
    or it is unreadable or not a JSON object."""
    index = folder / MODEL_INDEX
    if not index.is_file():
        raise ModelSourceError(f"{folder} is not a diffusers pipeline folder (no model_index.json)")
    try:
        meta = read_json(index)
    except (OSError, ValueError) as err:
        raise ModelSourceError(f"{index} cannot be read: {err}") from None
    if not isinstance(meta, dict):
        raise ModelSourceError(f"{index} is not a JSON object")
    return meta


def untrainable_reason(class_name: object) -> str:
    """Why a pipeline of `class_name` cannot be trained, listing what is accepted."""
    if not isinstance(class_name, str) or not class_name:
        return f"model_index.json names no pipeline class (_class_name); {accepted_text()}"
    known = KNOWN_UNTRAINABLE.get(class_name)
    what = f"{class_name} ({known})" if known else class_name
    return f"{what} is not a family lorastudio can train; {accepted_text()}"


def describe_non_pipeline(folder: Path) -> str:
    """Why a folder without model_index.json is not trainable: GGUF / other inference-only
    files, a single component (config.json + weights), a single-file checkpoint, or nothing
    recognisable. Lists what is accepted."""
    names = _file_names(folder)
    formats = inference_only_formats(names)
    if formats:
        files = ", ".join(n for n in names if weight_suffix(n) in (".gguf", ".onnx"))[:200]
        return (
            f"{folder} holds {', '.join(formats)} files ({files}), an inference-only format that cannot be "
            f"trained; {accepted_text()}"
        )
    config = folder / "config.json"
    weights = [n for n in names if weight_suffix(n) is not None]
    if config.is_file() and weights:
        cls = _class_name_of(config)
        return (
            f"{folder} holds a single component ({cls or 'config.json + weights'}), not a whole pipeline; "
            f"training needs every component (text encoders, VAE, denoiser). {accepted_text()}"
        )
    if weights:
        return (
            f"{folder} holds single-file checkpoint(s) ({', '.join(weights[:3])}), not a diffusers pipeline; "
            f"fetch the model's diffusers repo instead (or convert with diffusers' from_single_file + "
            f"save_pretrained). {accepted_text()}"
        )
    return f"{folder} is not a diffusers pipeline folder (no model_index.json); {accepted_text()}"


MAX_NAMES = 20_000  # entries of a non-pipeline folder read to say what it holds


def _file_names(folder: Path) -> list[str]:
    """The names of the regular files among the first MAX_NAMES entries of `folder`, sorted
    ([] when it cannot be read): what a folder that is no pipeline holds, without reading every
    entry of an added photo library."""
    names: list[str] = []
    try:
        with os.scandir(folder) as entries:
            for i, entry in enumerate(entries):
                if i >= MAX_NAMES:
                    break
                with contextlib.suppress(OSError):
                    if entry.is_file():
                        names.append(entry.name)
    except OSError:
        return []
    return sorted(names)


def _class_name_of(config: Path) -> str | None:
    try:
        meta = read_json(config)
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict):
        return None
    name = meta.get("_class_name") or (meta.get("architectures") or [None])[0]
    return name if isinstance(name, str) else None


def inspect_folder(folder: Path) -> Recognition:
    """Recognise the pipeline in `folder` and check it is complete. Never raises for content
    problems (they become `reason`); only reads."""
    folder = Path(folder)
    if not folder.is_dir():
        return Recognition(None, None, False, f"{folder} is not a folder", False, ())
    if not (folder / MODEL_INDEX).is_file():
        return Recognition(None, None, False, describe_non_pipeline(folder), False, ())
    try:
        index = read_model_index(folder)
    except ModelSourceError as err:
        return Recognition(None, None, False, str(err), False, ())
    class_name = index.get("_class_name")
    cls = class_name if isinstance(class_name, str) else None
    missing = tuple(pipeline_missing(folder, index))
    fam = family_of_pipeline(cls)
    if fam is None:
        return Recognition(None, cls, False, untrainable_reason(class_name), not missing, missing)
    facts = checkpoint_facts(folder)
    foreign = tuple(config_disagreements(folder, index, fam.title, fam.config_rules))
    known = {"checkpoint": _checkpoint_text(facts.known), "distilled": facts.distilled, "foreign": foreign}
    if foreign:
        return Recognition(
            fam.name, cls, False, foreign_reason(folder, foreign), not missing, missing, **known
        )
    if missing:
        return Recognition(fam.name, cls, False, incomplete_reason(folder, missing), False, missing, **known)
    return Recognition(fam.name, cls, True, None, True, (), **known)


def foreign_reason(folder: Path, foreign: tuple[str, ...] | list[str]) -> str:
    """'<folder> mixes models: vae/config.json: latent_channels 4, FLUX.1's transformer takes 16 ...'."""
    return f"{folder} mixes components of different models: {'; '.join(foreign)}"


def _checkpoint_text(known: KnownCheckpoint | None) -> str | None:
    if known is None:
        return None
    return f"{known.title}: {known.note}" if known.note else known.title


def incomplete_reason(folder: Path, missing: tuple[str, ...] | list[str]) -> str:
    """'<folder> is incomplete: missing component folder(s) vae; missing file(s) ...'."""
    folders = [m[:-1] for m in missing if m.endswith("/")]
    files = [m for m in missing if not m.endswith("/")]
    parts = []
    if folders:
        parts.append(f"missing component folder(s) {', '.join(folders)}")
    if files:
        parts.append(f"missing file(s) {', '.join(files)}")
    return f"{folder} is incomplete: {'; '.join(parts)}"


def vet_pipeline_folder(folder: Path, family: str) -> Recognition:
    """Check that `folder` is a complete diffusers pipeline that family `family` trains.

    The one base-model folder check of lorastudio: the training start path and the engine's
    preflight both call it before anything is loaded or freed. Returns the Recognition.
    Raises ModelSourceError: not a pipeline folder (GGUF, a single component, a single-file
    checkpoint), a pipeline no family trains (SD1.5, SD3, ...), a pipeline of another family,
    a component of another model (its config.json disagrees with the family's config rules,
    basemodels/agreement.py, or its weights' shapes with its config, weight_shapes.py; named with
    the fact), or an incomplete folder; every message says
    what is accepted instead.
    """
    folder = Path(folder)
    rec = inspect_folder(folder)
    if rec.pipeline_class is None:
        raise ModelSourceError(rec.reason or f"{folder} is not a diffusers pipeline folder")
    wanted = accepted_family(family)
    if rec.family is None:
        raise ModelSourceError(f"{folder}: {rec.reason}")
    if wanted is None or rec.family != wanted.name:
        trains = f"the {family} family trains {', '.join(wanted.pipelines)}" if wanted else accepted_text()
        raise ModelSourceError(
            f"{folder} is a {rec.pipeline_class} pipeline (family {rec.family!r}); {trains}. "
            f"Use family {rec.family!r} for this model."
        )
    if rec.foreign:
        raise ModelSourceError(foreign_reason(folder, rec.foreign))
    if not rec.complete:
        raise ModelSourceError(incomplete_reason(folder, rec.missing))
    return rec
