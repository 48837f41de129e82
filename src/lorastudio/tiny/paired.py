"""A small synthetic paired (edit) dataset: the sample dataset's shapes as control images and
their colour-inverted versions as targets, with the instruction as caption.

Layout (the `control/` sub-folder layout of data/pairs.py):
    shape_00.png, shape_00.txt ("invert the colours of a red circle on a blue background")
    control/shape_00.png       (the original image)
Byte-identical for a seed in any process; written atomically and idempotently.
"""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image, ImageOps

from lorastudio.errors import DatasetError
from lorastudio.tiny.dataset import sample_items
from lorastudio.tiny.staging import publish_once

PAIRED_DATASET_NAME = "tiny-shapes-paired"  # default folder name under the studio's datasets/


def paired_files(seed: int = 0) -> dict[str, bytes]:
    """Relative path -> bytes of the paired dataset: per item the target PNG, its caption and
    control/<stem>.png."""
    files: dict[str, bytes] = {}
    for item in sample_items(seed):
        with Image.open(io.BytesIO(item.png)) as source:
            inverted = ImageOps.invert(source.convert("RGB"))
        buffer = io.BytesIO()
        inverted.save(buffer, format="PNG", optimize=False, compress_level=6)
        files[f"{item.stem}.png"] = buffer.getvalue()
        files[f"{item.stem}.txt"] = f"invert the colours of {item.caption}\n".encode()
        files[f"control/{item.stem}.png"] = item.png
    return files


def _holds(folder: Path, files: dict[str, bytes]) -> bool:
    if not folder.is_dir():
        return False
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    return present == set(files) and all((folder / n).read_bytes() == b for n, b in files.items())


def make_paired_dataset(out_dir: str | Path, seed: int = 0) -> Path:
    """Write the paired dataset to `out_dir`; returns that path. Idempotent; atomic (staged, then
    renamed). Raises DatasetError if `out_dir` holds anything else or cannot be written."""
    out = Path(out_dir)
    files = paired_files(seed)

    def fill(staging: Path) -> None:
        (staging / "control").mkdir()
        for name, data in files.items():
            (staging / name).write_bytes(data)

    return publish_once(
        out,
        fill,
        lambda folder: _holds(folder, files),
        DatasetError,
        what="the paired dataset",
        refusal=f"{out} already exists and is not the paired sample dataset (seed {seed})",
    )
