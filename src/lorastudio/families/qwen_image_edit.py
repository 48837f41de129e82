"""Qwen-Image-Edit (QwenImageEditPipeline) and Edit-Plus (QwenImageEditPlusPipeline: 2509, 2511):
the Qwen-Image transformer editing one (Plus: up to three) reference images.

Conditioning is built by the pipelines' own code: `encode_prompts` calls the checkpoint's
pipeline's encode_prompt with the control images resized as its __call__ resizes them for
Qwen2.5-VL (the edit pipeline: ~1 MP; Plus: ~384x384 each, "Picture N:" in the template), so a
caption's features depend on its controls (spec.prompt_sees_controls: phase 1 keys them by
caption + control files). `predict` packs the control latents with the pipeline's prepare_latents,
appends them to the target's tokens and gives the transformer every image's shape (img_shapes:
its RoPE positions; 2511's zero_cond_t modulation reads them too); only the target tokens'
prediction is the output. Controls are cropped like their target (data/pairs.py), encoded as the
pipelines encode a reference (the posterior mean) and never noised; predict also takes them as a
list of K [B, C, hc, wc] (references of different sizes, as the Plus pipeline encodes them).

Flavours are rows of SPEC.variants read from the checkpoint: model_index's `_class_name` (Plus
or not) and, for Plus, the transformer's `zero_cond_t` (set in 2511's config, absent in 2509's).
Text-side, VAE, LoRA layout and sigma shift are Qwen-Image's (families/qwen_image.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from lorastudio.data.control_sizing import ControlSizing
from lorastudio.errors import DatasetError, FieldProblem
from lorastudio.families.base import CaptionTokens, Variant
from lorastudio.families.common import no_grad
from lorastudio.families.qwen_image import SPEC as QWEN_SPEC
from lorastudio.families.qwen_image import QwenImageFamily
from lorastudio.families.qwen_vl_processor import allow_processor_without_torchvision

if TYPE_CHECKING:
    import torch
    from PIL import Image

    from lorastudio.config import TrainConfig

EDIT, PLUS = "QwenImageEditPipeline", "QwenImageEditPlusPipeline"
PLUS_NOTE = (
    "Qwen-Image-Edit-Plus takes 0 to 3 reference images per sample (control/, control_2/, "
    "control_3/); its instruction template names them Picture 1..3 in slot order. A sample without "
    "any trains text-to-image (its encode_prompt without an image)."
)

SPEC = replace(
    QWEN_SPEC,
    name="qwen-image-edit",
    title="Qwen-Image-Edit",
    pipeline_class=EDIT,
    accepted_pipelines=(EDIT, PLUS),
    # the edit pipelines never truncate the instruction (their encode_prompt ignores
    # max_sequence_length): the setting is not offered rather than silently ignored
    defaults={k: v for k, v in QWEN_SPEC.defaults.items() if k != "max_sequence_length"},
    supports=QWEN_SPEC.supports - {"max_sequence_length"},
    no_max_sequence_length="the Qwen-Image-Edit pipelines never cut the instruction (their encode_prompt "
    "ignores max_sequence_length): it takes none",
    caption_tokens=CaptionTokens("processor", cuts=False),  # nothing to measure: nothing is cut
    text_padded=False,  # its embeddings cut to the caption's tokens
    control_images=(0, 3),  # the widest of the flavours; each row says its own
    edit_model=True,
    prompt_sees_controls=True,
    # the latents would be flipped, the controls Qwen2.5-VL reads not
    refuses_on={
        "random_flip": "Qwen-Image-Edit's text encoder reads each caption with its unflipped control "
        "images, so flipped samples would contradict their conditioning: turn it off"
    },
    # both pipelines VAE-encode a reference at calculate_dimensions(1024 * 1024, its ratio)
    control_sizing=ControlSizing("area", area=1024 * 1024, multiple=32, label="~1 MP"),
    variants=(
        Variant("edit-2511", "Qwen-Image-Edit-2511 (Plus)", {"_class_name": PLUS, "transformer.zero_cond_t": True},
                note=PLUS_NOTE, pipeline_class=PLUS, control_images=(0, 3)),
        Variant("edit-2509", "Qwen-Image-Edit-2509 (Plus)", {"_class_name": PLUS},
                note=PLUS_NOTE, pipeline_class=PLUS, control_images=(0, 3)),
        Variant("edit", "Qwen-Image-Edit", {}, pipeline_class=EDIT, control_images=(1, 1)),
    ),
)  # fmt: skip


def vl_images(encoders: Any, images: Sequence[Image.Image]) -> Any:
    """The control images as the checkpoint's edit pipeline hands them to Qwen2.5-VL (its
    __call__'s resizing): Plus, each at ~CONDITION_IMAGE_SIZE in its aspect ratio (a list);
    the edit pipeline, its one image at ~1 MP."""
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit as edit
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit_plus as plus

    resize = encoders.image_processor.resize
    if type(encoders).__name__ == PLUS:
        sizes = [plus.calculate_dimensions(plus.CONDITION_IMAGE_SIZE, im.width / im.height) for im in images]
        return [resize(im, h, w) for im, (w, h) in zip(images, sizes, strict=True)]
    if len(images) != 1:
        raise DatasetError(f"{EDIT} takes one control image per caption, got {len(images)}")
    w, h, _ = edit.calculate_dimensions(1024 * 1024, images[0].width / images[0].height)
    return resize(images[0], h, w)


class QwenImageEditFamily(QwenImageFamily):
    spec = SPEC

    @no_grad
    def encode_prompts(
        self,
        encoders: Any,
        prompts: list[str],
        cfg: TrainConfig,
        controls: Sequence[Sequence[Image.Image]] | None = None,
    ) -> list[dict[str, torch.Tensor]]:
        """Each prompt with its control images through the pipeline's encode_prompt, one prompt
        per call (as the pipelines encode; Plus numbers the images of one prompt). A prompt
        without images (Plus: a text-to-image sample) is encoded with image=None, as the Plus
        encode_prompt does (no "Picture" line, no vision tokens); the edit pipeline's template
        always holds one image, so it refuses one."""
        if controls is None or len(controls) != len(prompts):
            raise DatasetError("Qwen-Image-Edit encodes each caption with its control images")
        out = []
        for prompt, images in zip(prompts, controls, strict=True):
            if not images and type(encoders).__name__ != PLUS:
                raise DatasetError(
                    f"{EDIT} encodes every caption with one control image: {prompt!r} has none"
                )
            embeds, _ = encoders.encode_prompt(
                [prompt], image=vl_images(encoders, images) if images else None, device=encoders.device
            )
            # [1, L, D]; one prompt: no padding
            out.append({"prompt_embeds": embeds[0].cpu()})
        return out

    def render_without_references(self, pipe: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """Edit-Plus without a reference: QwenImageEditPlusPipeline.__call__ needs an image, so
        the prompt renders through QwenImagePipeline on the same transformer (LoRA included), VAE
        and scheduler, whose step is the Plus pipeline's with no reference tokens (img_shapes of
        the target alone, the same time shift); a text prompt is first encoded by the Plus
        pipeline's own encode_prompt with image=None (no "Picture" line), as training encodes a
        control-less sample. The single-image edit pipeline cannot (its template holds an image):
        refused with a ConfigError."""
        from diffusers import QwenImagePipeline

        from lorastudio.errors import ConfigError

        if type(pipe).__name__ != PLUS:
            raise ConfigError(
                [FieldProblem("controls", f"{type(pipe).__name__} edits one reference image: give one")]
            )
        out = prompts_encoded(pipe, kwargs, None)
        parts = {
            k: getattr(pipe, k) for k in ("scheduler", "vae", "text_encoder", "tokenizer", "transformer")
        }
        t2i = QwenImagePipeline(**parts)
        t2i.set_progress_bar_config(**getattr(pipe, "_progress_bar_config", {}))
        return t2i, out

    def render_sized_references(
        self, pipe: Any, kwargs: dict[str, Any], references: Sequence[Image.Image]
    ) -> tuple[Any, dict[str, Any]]:
        """Both pipelines VAE-encode every reference at ~1 MP whatever size it is handed: the
        render runs the pipeline's own __call__ with the handed sizes (families/qwen_edit_render.py),
        a `prompt` / `negative_prompt` text first encoded with `references` as training reads them."""
        from lorastudio.families.qwen_edit_render import encode_text_with_references, render_at_handed_sizes

        return render_at_handed_sizes(pipe), encode_text_with_references(pipe, kwargs, references)

    def prepare_pipeline_loading(self) -> None:
        """Its pipelines' Qwen2VLProcessor loads on hosts without torchvision (this imports
        transformers: called only where a pipeline loads, never at import)."""
        allow_processor_without_torchvision()

    def reference_pixels(self, image: Image.Image, width: int, height: int) -> torch.Tensor:
        """The pipelines' VAE input for a reference: ~1 MP (VAE_IMAGE_SIZE) in its aspect ratio,
        whatever the output size. Returns [3, H, W] in [-1, 1]."""
        from diffusers.image_processor import VaeImageProcessor
        from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit_plus as plus

        w, h = plus.calculate_dimensions(plus.VAE_IMAGE_SIZE, image.width / image.height)
        processor = VaeImageProcessor(vae_scale_factor=self.spec.vae_scale_factor * 2)
        return processor.preprocess(image, h, w)[0]  # [3, H, W]

    def predict(
        self,
        denoiser: Any,
        noisy: torch.Tensor,
        noise_level: torch.Tensor,
        cond: dict[str, Any],
        batch_info: Mapping[str, Any],
        cfg: TrainConfig,
    ) -> torch.Tensor:
        import torch
        from diffusers import QwenImageEditPlusPipeline

        from lorastudio.families.common import pack_2x2

        b, c, h, w = noisy.shape
        dtype, device = noisy.dtype, noisy.device
        controls = batch_info.get("controls")  # [B, K, C, hc, wc], K x [B, C, hc_k, wc_k], or None
        slots = (
            []
            if controls is None
            else (list(controls.unbind(1)) if isinstance(controls, torch.Tensor) else list(controls))
        )
        if not slots:  # text-to-image (Plus): the target's tokens alone, as with no reference
            return self._predict_tokens(denoiser, noisy, noise_level, cond, pack_2x2(noisy), None, [])
        parts = SimpleNamespace(
            vae_scale_factor=self.spec.vae_scale_factor,
            latent_channels=c,
            _pack_latents=QwenImageEditPlusPipeline._pack_latents,
        )  # what prepare_latents reads of its pipeline when given latents
        scale = self.spec.vae_scale_factor
        latents, references = QwenImageEditPlusPipeline.prepare_latents(
            parts,
            [slot[:, :, None].to(device, dtype) for slot in slots],  # K x [B, C, 1, hc, wc]
            b, c, h * scale, w * scale, dtype, device, None,
            latents=pack_2x2(noisy),  # [B, hw/4, C*4]
        )  # references [B, K*hc*wc/4, C*4], in slot order  # fmt: skip
        return self._predict_tokens(denoiser, noisy, noise_level, cond, latents, references, slots)

    def _predict_tokens(
        self,
        denoiser: Any,
        noisy: torch.Tensor,
        noise_level: torch.Tensor,
        cond: dict[str, Any],
        latents: torch.Tensor,
        references: torch.Tensor | None,
        slots: list[torch.Tensor],
    ) -> torch.Tensor:
        """The transformer on the packed target `latents` [B, hw/4, C*4] followed by the packed
        `references` [B, R, C*4] (None: none), their shapes from `slots` (K x [B, C, hc, wc]);
        returns the target tokens' prediction unpacked to [B, C, h, w]."""
        import torch

        from lorastudio.families.common import unpack_2x2, without_cudnn

        b, _, h, w = noisy.shape
        dtype, device = noisy.dtype, noisy.device
        shapes = [(1, h // 2, w // 2)] + [(1, sl.shape[-2] // 2, sl.shape[-1] // 2) for sl in slots]
        tokens = latents if references is None else torch.cat([latents, references], dim=1)
        mask = cond["prompt_mask"]  # [B, L], on the CPU
        with without_cudnn(not bool(mask.all())):  # a mask keeps cuDNN out (bench note 24)
            out = denoiser(
                hidden_states=tokens,  # [B, hw/4 (+ K*hc*wc/4), C*4]
                encoder_hidden_states=cond["prompt_embeds"].to(device, dtype),  # [B, L, D]
                encoder_hidden_states_mask=None if bool(mask.all()) else mask.to(device),
                timestep=noise_level.to(dtype),
                img_shapes=[shapes] * b,
                return_dict=False,
            )[0][:, : latents.shape[1]]  # [B, hw/4, C*4]: the target tokens
        return unpack_2x2(out, h, w)  # [B, C, h, w]


FAMILY = QwenImageEditFamily()


def prompts_encoded(pipe: Any, kwargs: dict[str, Any], image: Any) -> dict[str, Any]:
    """`kwargs` with its prompt and negative prompt (where given) replaced by the pipeline's own
    encode_prompt of them with `image` (the vision-language images, or None): the embeddings and
    masks Qwen-Image-Edit's pipelines take instead of the text."""
    out = dict(kwargs)
    for text, embeds, mask in (
        ("prompt", "prompt_embeds", "prompt_embeds_mask"),
        ("negative_prompt", "negative_prompt_embeds", "negative_prompt_embeds_mask"),
    ):
        if out.get(text) is not None:
            out[embeds], out[mask] = pipe.encode_prompt(
                out.pop(text), image=image, device=pipe._execution_device
            )
    return out
