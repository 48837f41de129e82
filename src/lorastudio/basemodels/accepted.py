"""What lorastudio can train: the registered families and the pipeline classes each accepts,
plus plain-words names of pipelines it recognises but cannot train (for refusal messages).

The table is read from the family registry on first use (the family modules import torch, so
this module imports them lazily; importing lorastudio.basemodels stays torch-free).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lorastudio.families.config_rules import ConfigRule


@dataclass(frozen=True)
class AcceptedFamily:
    """One trainable family: registry name, human title and the model_index `_class_name`s."""

    name: str
    title: str
    pipelines: tuple[str, ...]
    config_rules: tuple[ConfigRule, ...] = ()  # FamilySpec.config_rules (basemodels/agreement.py)


# Pipelines people commonly try that no registered family trains, in plain words.
KNOWN_UNTRAINABLE: dict[str, str] = {
    "StableDiffusionPipeline": "Stable Diffusion 1.x/2.x",
    "StableDiffusionImg2ImgPipeline": "Stable Diffusion 1.x/2.x",
    "StableDiffusionInpaintPipeline": "Stable Diffusion 1.x/2.x inpainting",
    "StableDiffusion3Pipeline": "Stable Diffusion 3 / 3.5",
    "StableDiffusionXLInpaintPipeline": "SDXL inpainting",
    "StableCascadeCombinedPipeline": "Stable Cascade",
    "PixArtAlphaPipeline": "PixArt-alpha",
    "PixArtSigmaPipeline": "PixArt-sigma",
    "SanaPipeline": "Sana",
    "AuraFlowPipeline": "AuraFlow",
    "HunyuanDiTPipeline": "Hunyuan-DiT",
    "KandinskyV22Pipeline": "Kandinsky 2.2",
    "LuminaPipeline": "Lumina",
    "CogView4Pipeline": "CogView4",
    "HiDreamImagePipeline": "HiDream-I1",
    "FluxKontextPipeline": "FLUX.1 Kontext (image editing)",
    "FluxFillPipeline": "FLUX.1 Fill (inpainting)",
    "FluxControlPipeline": "FLUX.1 Control",
    "QwenImageEditPipeline": "Qwen-Image-Edit (image editing)",
    "WanPipeline": "Wan (video)",
}


@lru_cache(maxsize=1)
def accepted_families() -> tuple[AcceptedFamily, ...]:
    """Every registered family with the pipeline classes it trains, in registry order."""
    from lorastudio import families

    return tuple(
        AcceptedFamily(f.spec.name, f.spec.title, tuple(f.spec.accepted_pipelines), f.spec.config_rules)
        for f in families.all_families()
    )


def family_of_pipeline(class_name: object) -> AcceptedFamily | None:
    """The family that trains pipelines of `class_name` (a model_index `_class_name`), or None."""
    for fam in accepted_families():
        if class_name in fam.pipelines:
            return fam
    return None


def accepted_family(name: str) -> AcceptedFamily | None:
    """The accepted family registered as `name`, or None."""
    return next((f for f in accepted_families() if f.name == name), None)


def accepted_text() -> str:
    """'lorastudio trains diffusers pipeline folders of: Stable Diffusion XL (sdxl:
    StableDiffusionXLPipeline, ...), FLUX.1 (flux: FluxPipeline, ...), ...' for error messages."""
    parts = [f"{f.title} ({f.name}: {', '.join(f.pipelines)})" for f in accepted_families()]
    return "lorastudio trains diffusers pipeline folders of: " + "; ".join(parts)
