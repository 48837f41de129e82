"""A paired copy of a dataset for the edit families' tests: each target image gets a control image
(its colour inverse) under control/, as Qwen-Image-Edit, FLUX.1 Kontext and FLUX.2 take them."""

from __future__ import annotations

import shutil
from pathlib import Path

from PIL import Image, ImageOps


def with_controls(source: Path, out: Path) -> Path:
    """Copy dataset folder `source` to `out` (which must not exist) and add control/<name> for
    each PNG target: the image's colour inverse. Returns `out`."""
    shutil.copytree(source, out)
    (out / "control").mkdir()
    for img in sorted(source.glob("*.png")):
        with Image.open(img) as image:
            ImageOps.invert(image.convert("RGB")).save(out / "control" / img.name)
    return out
