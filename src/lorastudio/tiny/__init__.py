"""Tiny random-weight pipelines of every family and a small sample dataset, built fully offline.

The pipelines use the real diffusers / transformers classes (denoiser, text encoders, tokenizers,
VAE, scheduler with the family's real config), shrunk to hidden sizes of 16-64 so a training step
and a 2-step generation run in well under a second on a CPU. They are what the demo, the tests
and the contract suite train on. Same seed -> byte-identical files in any process.

Public API:
    TINY_FAMILIES
    build_tiny_pipeline(family, seed=0) -> DiffusionPipeline   (in memory, eval mode)
    save_tiny_model(family, out_dir, seed=0) -> Path          (diffusers folder; idempotent, atomic)
    make_sample_dataset(out_dir, seed=0) -> Path              (8 PNG + 8 .txt; idempotent, atomic)
    tiny_model_dir(family, models_dir) -> Path                (models_dir / "tiny-<family>")

torch, diffusers and transformers are imported only when a pipeline is built.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from lorastudio import json_read
from lorastudio.errors import DatasetError, ModelSourceError, UnknownFamily
from lorastudio.tiny.staging import publish_once

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline

TINY_FAMILIES: tuple[str, ...] = (
    "sdxl",
    "flux",
    "qwen-image",
    "z-image",
    "flux2",
    "flux2-klein",
    "flux-kontext",
    "qwen-image-edit",
    "chroma",
    "krea2",
)
SAMPLE_DATASET_NAME = "tiny-shapes"  # default dataset folder name under the studio's datasets/
MARKER_FILE = "lorastudio_tiny.json"  # written last into a tiny model folder: {"family", "seed", "format"}
_FORMAT = 1  # bump when the tiny architectures change, so old folders are not taken as current

__all__ = [
    "MARKER_FILE",
    "SAMPLE_DATASET_NAME",
    "TINY_FAMILIES",
    "build_tiny_pipeline",
    "make_sample_dataset",
    "read_marker",
    "save_tiny_model",
    "tiny_model_dir",
]


def _check_family(family: str) -> str:
    if family not in TINY_FAMILIES:
        raise UnknownFamily(str(family), list(TINY_FAMILIES))
    return family


def tiny_model_dir(family: str, models_dir: Path) -> Path:
    """The canonical folder of a tiny model: `models_dir / f"tiny-{family}"`.

    Raises UnknownFamily for a name outside TINY_FAMILIES.
    """
    return Path(models_dir) / f"tiny-{_check_family(family)}"


def build_tiny_pipeline(family: str, seed: int = 0) -> DiffusionPipeline:
    """Build the tiny pipeline of `family` in memory, every module in eval mode (float32, CPU).

    The caller's torch RNG state is left untouched. Raises UnknownFamily for a bad name.
    """
    from lorastudio.tiny import models

    return models.build(_check_family(family), seed)


def read_marker(folder: str | Path) -> dict[str, object] | None:
    """The tiny-model marker of `folder` ({"family", "seed", "format"}), or None if it has none."""
    path = Path(folder) / MARKER_FILE
    try:
        data = json_read.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _holds_tiny_model(folder: Path, family: str, seed: int) -> bool:
    marker = read_marker(folder)
    wanted = {"family": family, "seed": seed, "format": _FORMAT}
    return marker == wanted and (folder / "model_index.json").is_file()


def save_tiny_model(family: str, out_dir: str | Path, seed: int = 0) -> Path:
    """Write the tiny `family` pipeline as a diffusers folder at `out_dir`; returns that path.

    Idempotent: if `out_dir` already holds the tiny model of this family and seed, returns at
    once. Atomic: the folder is written to a hidden sibling and renamed, so it is either absent
    or complete. Loads with `DiffusionPipeline.from_pretrained(out_dir)` offline.
    Raises UnknownFamily for a bad name (nothing is written), and ModelSourceError if `out_dir`
    exists and holds anything else (it is never overwritten) or cannot be written.
    """
    _check_family(family)
    out = Path(out_dir)

    def fill(staging: Path) -> None:
        pipe = build_tiny_pipeline(family, seed)
        pipe.save_pretrained(staging, safe_serialization=True)
        marker = {"family": family, "seed": seed, "format": _FORMAT}
        (staging / MARKER_FILE).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")

    return publish_once(
        out,
        fill,
        lambda folder: _holds_tiny_model(folder, family, seed),
        ModelSourceError,
        what=f"the tiny {family!r} model",
        refusal=f"{out} already exists and is not the tiny {family!r} model (seed {seed}); "
        "remove it or choose another folder",
    )


def make_sample_dataset(out_dir: str | Path, seed: int = 0) -> Path:
    """Write the sample dataset (8 shape PNGs + 8 .txt captions) to `out_dir`; returns that path.

    Idempotent: if `out_dir` already holds exactly these files, returns at once. Atomic (staged,
    then renamed). Raises DatasetError if `out_dir` exists and holds anything else, or cannot be
    written.
    """
    from lorastudio.tiny.dataset import expected_files

    out = Path(out_dir)
    files = expected_files(seed)

    def holds_dataset(folder: Path) -> bool:
        if not folder.is_dir():
            return False
        present = {p.name for p in folder.iterdir()}
        return present == set(files) and all(
            (folder / n).is_file() and (folder / n).read_bytes() == b for n, b in files.items()
        )

    def fill(staging: Path) -> None:
        for name, data in files.items():
            (staging / name).write_bytes(data)

    return publish_once(
        out,
        fill,
        holds_dataset,
        DatasetError,
        what="the sample dataset",
        refusal=f"{out} already exists and is not the sample dataset (seed {seed}); "
        "remove it or choose another folder",
    )
