"""Reference images for the edit pipelines (Kontext, FLUX.2, Qwen-Image-Edit): each fitted to the
output size as a training control is, and the pipeline `__call__` arguments that carry them.
Shared by generation (generate/pipeline.py), a run's sample previews and its conditioning."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from PIL import Image

if TYPE_CHECKING:
    from lorastudio.data.control_sizing import ControlRule, ControlSizing


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


def run_sizer(sizing: ControlSizing | None, rule: ControlRule) -> Callable[[Image.Image], Image.Image] | None:
    """How a run with control_resolution `rule` sizes a reference where it sizes its controls on
    their own ("pipeline" or a side; data/control_sizing.py, `sizing` the family's pipeline rule):
    an RGB image -> the image training would have encoded; None for "target" (or a family without
    a rule), whose references are fitted to the output size (fit_reference)."""
    from lorastudio.data.control_sizing import control_size, rule_area, sized_image

    if sizing is None or rule == "target":
        return None

    def resize(image: Image.Image) -> Image.Image:
        size = control_size(sizing, rule, image.width, image.height)
        return image if size is None else sized_image(image, size, sizing, rule_area(rule))

    return resize
