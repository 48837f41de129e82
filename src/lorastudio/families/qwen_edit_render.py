"""Qwen-Image-Edit / Edit-Plus rendered with each reference VAE-encoded at the size it is handed
(a run's sample previews, and Generate told a run's control_resolution), not at ~1 MP.

Why by hand: diffusers 0.42.1's QwenImageEditPipeline / QwenImageEditPlusPipeline `__call__` sizes
every reference for its VAE at `calculate_dimensions(1024 * 1024, its aspect ratio)` (Plus:
VAE_IMAGE_SIZE) whatever size it is handed, and takes no argument for it: reference latents given
as `image=` (a tensor of latent channels) skip that resize but leave unset what the rest of
`__call__` reads (Plus: condition_images and vae_image_sizes, an UnboundLocalError; the edit
pipeline reads the tensor's `.size` as a PIL size), and prepare_latents only receives the pixels
already resized while `__call__` itself lays out img_shapes (the references' RoPE positions) from
the same sizes. So the pipeline's own `__call__` code is run with one name of its module seen
otherwise: `calculate_dimensions`, which answers the VAE area with the own size of the handed
reference of that aspect ratio (both pipelines ask by ratio; the run's rules give references of one
ratio one size), and every other area (Plus's ~384 x 384 text-encoder images) as diffusers does;
both pipelines' default output size (asked at the same area) is then the reference's, and a
render always passes width and height. Nothing else of diffusers is copied; the module itself
is never changed (a copy of its globals per call: thread-safe, a plain pipeline call unaffected).
A diffusers whose `__call__` no longer sizes references through that function is refused by name.

On the tiny model at control_resolution 64 a preview round went from minutes of CPU (a 1024 x 1024
VAE encode a reference and ~4,100 reference tokens a step) to seconds (RELIABILITY 1490).
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

_VAE_AREA = 1024 * 1024  # both pipelines' VAE area (Plus: VAE_IMAGE_SIZE; the edit pipeline: a literal)
_NAME = "calculate_dimensions"


class ReferenceSizingError(RuntimeError):
    """The installed pipeline does not size its references as this module expects."""


def render_at_handed_sizes(pipe: Any) -> Callable[..., Any]:
    """A callable taking the pipeline's `__call__` arguments that runs `type(pipe).__call__`'s own
    code with each PIL reference of `image=` (one, or a list) VAE-encoded at its own (width,
    height): those sides must be multiples of 16 (vae_scale_factor x 2), as the run's sizes are.
    Raises ReferenceSizingError when the pipeline's `__call__` does not read `calculate_dimensions`
    (another diffusers), or for references of one aspect ratio at two sizes."""
    import torch

    code = inspect.unwrap(type(pipe).__call__)  # under @torch.no_grad / replace_example_docstring
    module = sys.modules[code.__module__]
    original = getattr(module, _NAME, None)
    if original is None or _NAME not in code.__code__.co_names:
        raise ReferenceSizingError(
            f"{type(pipe).__name__}.__call__ does not size its references through {_NAME} "
            "(diffusers changed): previews cannot encode them at the run's size"
        )

    def render(*args: Any, image: Any = None, **kwargs: Any) -> Any:
        images = image if isinstance(image, list) else [] if image is None else [image]
        sizes: dict[float, tuple[int, int]] = {}
        for im in images:  # the pipeline asks by aspect ratio: one size per ratio
            if sizes.setdefault(im.width / im.height, im.size) != im.size:
                raise ReferenceSizingError(
                    f"references of one aspect ratio at two sizes ({sizes[im.width / im.height]} and "
                    f"{im.size}) cannot each be encoded at their own by {type(pipe).__name__}"
                )

        def dimensions(area: float, ratio: float) -> tuple[Any, ...]:
            out = original(area, ratio)  # (w, h) for Plus, (w, h, None) for the edit pipeline
            if area != _VAE_AREA:
                return out
            if ratio not in sizes:
                raise ReferenceSizingError(
                    f"{type(pipe).__name__} sized a reference of ratio {ratio} not handed"
                )
            return (*sizes[ratio], *out[2:])

        scope = {**vars(module), _NAME: dimensions}
        call = types.FunctionType(code.__code__, scope, code.__name__, code.__defaults__, code.__closure__)
        call.__kwdefaults__ = code.__kwdefaults__
        with torch.no_grad():
            return call(pipe, *args, image=image, **kwargs)

    return render


def encode_text_with_references(
    pipe: Any, kwargs: dict[str, Any], references: Sequence[Any]
) -> dict[str, Any]:
    """`kwargs` with its `prompt` / `negative_prompt` texts replaced by their embeddings and masks,
    encoded by the pipeline's own encode_prompt with `references` as training's text encoder reads
    them (qwen_image_edit.vl_images: Plus ~384 x 384 each, the edit pipeline ~1 MP), not as the
    handed (run-sized) `image=`: the edit pipeline would read those at their own size."""
    from lorastudio.families.qwen_image_edit import prompts_encoded, vl_images

    return prompts_encoded(pipe, kwargs, vl_images(pipe, list(references)))
