"""Reference images for the edit pipelines (Kontext, FLUX.2, Qwen-Image-Edit): each fitted to the
output size as a training control is, and the pipeline `__call__` arguments that carry them.
Shared by generation (generate/pipeline.py), a run's sample previews and its conditioning."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from PIL import Image


def fit_reference(image: Image.Image, width: int, height: int) -> Image.Image:
    """A reference image resized to cover (width, height) (Lanczos) and centre-cropped to it,
    as data.pairs.load_control_crop prepares a control for a target of that size."""
    from lorastudio.data.crop import cover_crop, resized_size

    rgb = image.convert("RGB")
    rw, rh = resized_size(rgb.width, rgb.height, (width, height))
    return cover_crop(rgb, (rw, rh), ((rh - height) // 2, (rw - width) // 2), (width, height))


def reference_kwargs(
    pipe: Any,
    max_controls: int,
    controls: Sequence[Image.Image],
    width: int,
    height: int,
    resize: Callable[[Image.Image], Image.Image] | None = None,
) -> dict[str, Any]:
    """The edit pipeline `__call__` arguments for reference images: `image` (each reference
    fitted to width x height, or given to `resize` (a run's control sizing: sample previews);
    one image for a family taking one, else a list) and, for a pipeline that picks its own
    output size, max_area = width * height. {} for neither."""
    kwargs: dict[str, Any] = {}
    if controls:
        fitted = [resize(img) if resize else fit_reference(img, width, height) for img in controls]
        kwargs["image"] = fitted[0] if max_controls == 1 else fitted
    if "max_area" in inspect.signature(type(pipe).__call__).parameters:
        kwargs["max_area"] = width * height  # else the edit pipeline picks its own output size
    return kwargs
