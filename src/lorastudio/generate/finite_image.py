"""A generated image checked for non-finite pixels before it becomes a PIL image.

A pipeline's "pil" output casts its float pixels to uint8, where NaN and infinity become 0 (numpy
warns, nothing fails): a LoRA with finite but huge weights (B @ A past float32's range: 1e20 in
each factor) or a base whose numbers overflow in its precision gave a black image that was saved,
listed and kept. Generation asks for the "np" output and converts it here, as diffusers does
(VaeImageProcessor.numpy_to_pil), after the check (RELIABILITY 1561)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lorastudio.errors import GenerationFailed

if TYPE_CHECKING:
    from PIL import Image


def finite_image(pixels: Any) -> Image.Image:
    """The PIL image of a pipeline's "np" output `pixels` ([H, W, C] floats in 0..1), converted
    exactly as its "pil" output is (diffusers' numpy_to_pil: x 255, rounded, uint8). Raises
    GenerationFailed when a pixel is NaN or infinite: the cast made those 0 (a black or
    black-speckled image, written and kept with only a numpy warning in the log), from LoRAs whose
    finite numbers overflow at their strength (B @ A past float32's range) or a base whose numbers
    overflow in this precision (RELIABILITY 1561)."""
    import numpy as np
    from diffusers.image_processor import VaeImageProcessor

    pixels = np.asarray(pixels)
    bad = int(pixels.size - np.isfinite(pixels).sum())
    if bad:
        raise GenerationFailed(
            f"the image came out with {bad} of its {pixels.size} values not finite (NaN or infinite: they "
            "would be black), so none was kept: the numbers overflowed, from a LoRA whose weights are too "
            "large at its strength (try a lower strength or leave it out) or a base model that overflows "
            "in this precision"
        )
    return VaeImageProcessor.numpy_to_pil(pixels)[0]
