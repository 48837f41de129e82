"""Known checkpoints: hub repos lorastudio recognises by name, beyond their pipeline class, and
what a checkpoint says about itself. A row never decides the family (model_index.json's
`_class_name` does): it names the checkpoint in the catalogue (Qwen-Image-2512 is a
QwenImagePipeline, so it trains as `qwen-image`) and says whether it is step-distilled.

Whether a base is step-distilled (turbo / few-step: the case for an assistant LoRA, see
training/adapters/assistant.py) is read, in this order:
  1. model_index.json's `is_distilled` (Krea2Pipeline, Flux2KleinPipeline write it; absent, their
     default False: FLAG_DEFAULTS). flux2-klein's variant rows (FamilySpec.variants) read the same
     flag, so Family.distilled and the variant always agree;
  2. the row of the checkpoint's hub repo: given as a hub id, named by lorastudio's fetch marker
     (models/<owner>--<name>/lorastudio_fetch.json) or by its hub-cache folder
     (models--<owner>--<name>/snapshots/<commit>);
  3. otherwise it is unknown (None).
Pure functions over names and files (no torch, no network).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lorastudio.basemodels.jsonfile import read_json
from lorastudio.basemodels.layout import MODEL_INDEX


@dataclass(frozen=True)
class KnownCheckpoint:
    """One known hub repo: the family its pipeline class trains as, a display title, whether it
    is step-distilled, and a note for the catalogue."""

    repo_id: str
    family: str
    title: str
    distilled: bool
    note: str = ""


KNOWN_CHECKPOINTS: tuple[KnownCheckpoint, ...] = (
    KnownCheckpoint("black-forest-labs/FLUX.1-dev", "flux", "FLUX.1 [dev]", False, "guidance-distilled, not step-distilled"),
    KnownCheckpoint("black-forest-labs/FLUX.1-schnell", "flux", "FLUX.1 [schnell]", True, "4-step distilled"),
    KnownCheckpoint("black-forest-labs/FLUX.1-Krea-dev", "flux", "FLUX.1 Krea [dev]", False, "a FluxPipeline: trains as flux"),
    KnownCheckpoint("Qwen/Qwen-Image", "qwen-image", "Qwen-Image", False),
    KnownCheckpoint(
        "Qwen/Qwen-Image-2512",
        "qwen-image",
        "Qwen-Image-2512",
        False,
        "the December 2025 Qwen-Image: same QwenImagePipeline class and architecture, trains as qwen-image",
    ),
    KnownCheckpoint("Tongyi-MAI/Z-Image", "z-image", "Z-Image (base)", False),
    KnownCheckpoint("Tongyi-MAI/Z-Image-Turbo", "z-image", "Z-Image Turbo", True, "8-step distilled"),
    KnownCheckpoint("black-forest-labs/FLUX.2-dev", "flux2", "FLUX.2 [dev]", False, "guidance-distilled, not step-distilled"),
    KnownCheckpoint("black-forest-labs/FLUX.2-klein-4B", "flux2-klein", "FLUX.2 [klein] 4B", True, "4-step distilled"),
    KnownCheckpoint("black-forest-labs/FLUX.2-klein-9B", "flux2-klein", "FLUX.2 [klein] 9B", True, "4-step distilled"),
    KnownCheckpoint("black-forest-labs/FLUX.2-klein-base-4B", "flux2-klein", "FLUX.2 [klein] base 4B", False),
    KnownCheckpoint("black-forest-labs/FLUX.2-klein-base-9B", "flux2-klein", "FLUX.2 [klein] base 9B", False),
    KnownCheckpoint("lodestones/Chroma1-HD", "chroma", "Chroma1-HD", False),
    KnownCheckpoint("lodestones/Chroma1-Base", "chroma", "Chroma1-Base", False),
)  # fmt: skip
_BY_REPO = {row.repo_id.lower(): row for row in KNOWN_CHECKPOINTS}


@dataclass(frozen=True)
class CheckpointFacts:
    """What lorastudio knows of one checkpoint: its known row (None when not listed), whether it
    is step-distilled (None: unknown) and where that was read (for messages)."""

    known: KnownCheckpoint | None
    distilled: bool | None
    distilled_from: str | None  # "model_index.json is_distilled", "known checkpoint <repo>", None


def known_checkpoint(repo_id: str | None) -> KnownCheckpoint | None:
    """The row of hub repo `repo_id` (case-insensitive), or None."""
    return _BY_REPO.get(repo_id.lower()) if repo_id else None


def repo_of_folder(folder: Path) -> str | None:
    """The hub repo a folder holds, when it says: lorastudio's fetch marker, or the hub cache's
    folder layout (models--owner--name/snapshots/<commit>). None otherwise."""
    try:
        marker = read_json(folder / "lorastudio_fetch.json")
    except (OSError, ValueError):
        marker = None
    if isinstance(marker, dict) and isinstance(marker.get("repo_id"), str):
        return marker["repo_id"]
    storage = folder.parent.parent.name if folder.parent.name == "snapshots" else ""
    if storage.startswith("models--") and storage.count("--") >= 2:
        return storage.removeprefix("models--").replace("--", "/", 1)
    return None


# pipelines whose __init__ registers `is_distilled` (default False): a model_index.json of theirs
# without the flag is that default (what the pipeline, and flux2-klein's variant rows, take it as)
FLAG_DEFAULTS: dict[str, bool] = {"Flux2KleinPipeline": False, "Krea2Pipeline": False}


def _index_flag(folder: Path | None) -> tuple[bool, str] | None:
    """model_index.json's `is_distilled` (or its pipeline's default) and where it was read."""
    if folder is None:
        return None
    try:
        index = read_json(folder / MODEL_INDEX)
    except (OSError, ValueError):
        return None
    if not isinstance(index, dict):
        return None
    flag = index.get("is_distilled")
    if isinstance(flag, bool):
        return flag, f"{MODEL_INDEX} is_distilled={str(flag).lower()}"
    cls = index.get("_class_name")
    if flag is None and cls in FLAG_DEFAULTS:
        default = FLAG_DEFAULTS[cls]
        return default, f"{MODEL_INDEX} has no is_distilled: {cls}'s default, {str(default).lower()}"
    return None


def checkpoint_facts(folder: Path | None, repo_id: str | None = None) -> CheckpointFacts:
    """Facts of the checkpoint in `folder` (None: not on disk) from hub repo `repo_id` (None:
    taken from the folder when it says). See the module docstring for the order."""
    repo = repo_id or (repo_of_folder(folder) if folder is not None else None)
    known = known_checkpoint(repo)
    flag = _index_flag(folder)
    if flag is not None:
        return CheckpointFacts(known, *flag)
    if known is not None:
        return CheckpointFacts(known, known.distilled, f"known checkpoint {known.repo_id}")
    return CheckpointFacts(None, None, None)
