"""Tiny Qwen-Image-Edit pipelines (QwenImageEditPipeline, QwenImageEditPlusPipeline): the tiny
Qwen-Image parts (tiny/qwen_image.py: Qwen2.5-VL with its vision tower, MM-DiT, Qwen VAE) plus a
Qwen2VLProcessor over the tiny Qwen tokenizer and the Qwen2-VL image processor. The processor
keeps the real patching (14 px patches, 2x2 merge, 2 frames) and caps the pixels an image may
take (`max_pixels`) so a control image costs at most 64 vision tokens. The VAE is narrower than
tiny Qwen-Image's (2 channels at every level; same 8x, same latent space): the edit pipelines
encode every reference at ~1 MP, where CPU 3-D convolutions cost seconds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline

MAX_VISION_PIXELS = 64 * 28 * 28  # at most 64 merged vision tokens per image (the real: 16384)


def qwen_vl_processor() -> Any:
    """A Qwen2VLProcessor: the tiny Qwen tokenizer and Qwen2-VL's image processor (its PIL
    implementation where torchvision is missing: families/qwen_vl_processor.py), and where
    torchvision is installed Qwen2-VL's video processor too (transformers requires it there)."""
    from transformers import Qwen2VLProcessor
    from transformers.utils import is_torchvision_available

    from lorastudio.families.qwen_vl_processor import allow_processor_without_torchvision
    from lorastudio.tiny import tokenizers as toks

    allow_processor_without_torchvision()
    if is_torchvision_available():
        from transformers import Qwen2VLImageProcessor as ImageProcessor
    else:
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
            Qwen2VLImageProcessorPil as ImageProcessor,
        )
    images = ImageProcessor(min_pixels=56 * 56, max_pixels=MAX_VISION_PIXELS)
    if not is_torchvision_available():  # no video processor: allow_processor_without_torchvision
        return Qwen2VLProcessor(image_processor=images, tokenizer=toks.qwen_tokenizer())
    # With torchvision, transformers 5 refuses a Qwen2VLProcessor without its video processor
    # (found on the GPU host: "Received a NoneType for argument video_processor"); never used here.
    from transformers import Qwen2VLVideoProcessor

    videos = Qwen2VLVideoProcessor(min_pixels=56 * 56, max_pixels=MAX_VISION_PIXELS)
    return Qwen2VLProcessor(image_processor=images, tokenizer=toks.qwen_tokenizer(), video_processor=videos)


def build_qwen_image_edit(seed: int, plus: bool = False, zero_cond_t: bool = False) -> DiffusionPipeline:
    """Qwen-Image-Edit (plus=False) or Edit-Plus (2509; 2511 with zero_cond_t=True): the tiny
    Qwen-Image parts in the edit pipeline, with a Qwen2VLProcessor."""
    from diffusers import AutoencoderKLQwenImage, QwenImageEditPipeline, QwenImageEditPlusPipeline

    from lorastudio.tiny.parts import seed_for
    from lorastudio.tiny.qwen_image import build_qwen_image, qwen_image_transformer

    parts = dict(build_qwen_image(seed).components)
    seed_for(seed, "edit-vae")
    parts["vae"] = AutoencoderKLQwenImage(  # latents_mean / latents_std: the real defaults
        base_dim=2, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1, temperal_downsample=[False, True, True]
    )
    if zero_cond_t:  # the 2511 transformer: same weights, reference tokens modulated at t = 0
        transformer = qwen_image_transformer(seed)
        parts["transformer"] = type(transformer).from_config(transformer.config, zero_cond_t=True)
        parts["transformer"].load_state_dict(transformer.state_dict())
    cls = QwenImageEditPlusPipeline if plus else QwenImageEditPipeline
    return cls(processor=qwen_vl_processor(), **parts)
