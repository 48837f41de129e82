"""Tiny builders of the edit families: the real edit pipeline classes around the tiny parts of
the text-to-image family they extend (tiny/models.py), so weights, tokenizers and configs are
those of that family's tiny model."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline


def build_flux_kontext(seed: int) -> DiffusionPipeline:
    """FLUX.1 Kontext [dev]: the tiny FLUX.1-dev parts in a FluxKontextPipeline."""
    from diffusers import FluxKontextPipeline

    from lorastudio.tiny.models import build_flux

    parts = build_flux(seed).components
    return FluxKontextPipeline(
        **{k: v for k, v in parts.items() if k not in ("image_encoder", "feature_extractor")}
    )


def build_qwen_image_edit(seed: int) -> DiffusionPipeline:
    """Qwen-Image-Edit: the tiny Qwen-Image parts in a QwenImageEditPipeline (tiny/qwen_edit.py)."""
    from lorastudio.tiny.qwen_edit import build_qwen_image_edit as build

    return build(seed)


EDIT_BUILDERS: dict[str, Callable[[int], DiffusionPipeline]] = {
    "flux-kontext": build_flux_kontext,
    "qwen-image-edit": build_qwen_image_edit,
}
