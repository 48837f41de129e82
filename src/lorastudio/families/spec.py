"""A family's declarative half: `FamilySpec` (constants: objective, latent channels, LoRA
targets, defaults, capabilities, generation settings) and `Variant` (one flavour of the
architecture, told apart by facts read from the checkpoint). No behaviour lives here; the hooks
are `Family` (families/base.py), which re-exports both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from lorastudio.data.control_sizing import ControlSizing
from lorastudio.families.config_rules import ConfigRule

Objective = Literal["ddpm", "flow"]
# how a family's pipeline wraps a caption before its tokenizer (training/inputs/caption_length.py counts
# it the same way): "plain" none; "qwen_image" QwenImagePipeline's prompt_template_encode (its
# first prompt_template_encode_start_idx tokens dropped); "chat_thinking" / "chat" the
# tokenizer's chat template with / without Qwen3's enable_thinking (Z-Image / FLUX.2 klein);
# "flux2_system" Flux2Pipeline's system message and the processor's chat template; "krea2"
# Krea2Pipeline's prefix + caption (prefix dropped), its suffix counted
CaptionTemplate = Literal["plain", "qwen_image", "chat_thinking", "chat", "flux2_system", "krea2"]


@dataclass(frozen=True)
class CaptionTokens:
    """How a caption is measured against what a family's text encoder reads, so a run names the
    captions its pipeline's encode_prompt cuts short (training/inputs/caption_length.py)."""

    tokenizer: str  # the text pipeline's attribute holding the tokenizer (processor) it calls
    # the most tokens it reads, special and template ones included (the dropped prefix not);
    # None: the run's max_sequence_length
    limit: int | None = None
    template: CaptionTemplate = "plain"
    # False: the pipeline never cuts a caption (Qwen-Image-Edit's encode_prompt ignores
    # max_sequence_length), so nothing is measured
    cuts: bool = True


@dataclass(frozen=True)
class Variant:
    """One flavour of a family's architecture (FLUX.2 klein 4B / 9B, base / distilled ...): a
    row of FamilySpec.variants, told apart by facts read from the checkpoint (see
    `checkpoint_facts`), never by its name. The first row whose `when` facts all match wins."""

    name: str  # "klein-9b-distilled"
    title: str  # "FLUX.2 [klein] 9B (step-distilled)"
    when: Mapping[str, Any]  # checkpoint fact -> value, e.g. {"is_distilled": True}
    generation_defaults: Mapping[str, Any] = field(default_factory=dict)  # over the spec's
    note: str | None = None  # what training this flavour means (preflight report, run notes)
    # what this flavour's checkpoints run with, where it differs from the spec's: its diffusers
    # pipeline class (Qwen-Image-Edit's Plus checkpoints) and its (min, max) control images
    pipeline_class: str | None = None
    control_images: tuple[int, int] | None = None


@dataclass(frozen=True)
class FamilySpec:
    """Declarative constants of a family. No behaviour lives here."""

    name: str  # registry key: "sdxl", "flux", "qwen-image", "z-image"
    title: str  # human name: "FLUX.1"
    pipeline_class: str  # diffusers pipeline class used for loading, generation and LoRA files
    accepted_pipelines: tuple[str, ...]  # model_index.json `_class_name`s this family trains
    denoiser: str  # pipeline component trained with LoRA: "unet" or "transformer"
    objective: Objective  # "ddpm" (epsilon / v from the scheduler config) or "flow" (rectified)
    latent_channels: int
    vae_scale_factor: int  # pixels per latent cell along one side
    resolution_multiple: int  # training resolutions must be multiples of this (pixels)
    lora_targets: tuple[str, ...]  # default LoRA target module names (peft suffix match)
    lora_layers_kwarg: str  # keyword of pipeline.save_lora_weights for the denoiser's layers
    patch_size: int  # latent cells per token side (2 for the packed/patched transformers, 1 for U-Nets)
    denoiser_class: str  # diffusers model class of the denoiser, e.g. "FluxTransformer2DModel"
    vae_class: str  # diffusers model class of the VAE, e.g. "AutoencoderKL"
    defaults: Mapping[str, Any]  # TrainConfig field -> family default (learning_rate, lora_rank, ...)
    supports: frozenset[str]  # family-specific TrainConfig fields this family honours
    generation_defaults: Mapping[str, Any] = field(default_factory=dict)  # pipeline __call__ kwargs
    vae_in_fp32: bool = False  # keep the VAE in fp32 whatever the training dtype (SDXL's overflows in fp16)
    # block classes compile "wide" compiles (wider regions than the repeated blocks: the U-Net's
    # glue); empty: the repeated blocks already hold the family's compute, "wide" is refused
    wide_compile_blocks: tuple[str, ...] = ()
    # block class name -> groups of its frozen projections that read the same input (member
    # module paths), fused into one matmul per group by TrainConfig.fuse_projections
    # (training/speed/fused_projections.py); empty: nothing to fuse, fuse_projections "on" is refused
    fused_projection_groups: Mapping[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict)
    # pipeline __call__ kwargs that make each step ONE conditional denoiser call (classifier-free
    # guidance off), e.g. {"guidance_scale": 1.0}; empty where the defaults already do. What "one
    # denoising step of the pipeline" means for predict's contract (tests/families)
    no_cfg_kwargs: Mapping[str, Any] = field(default_factory=dict)
    # the pipeline runs a second pass on a negative prompt ("" unless given) that it encodes
    # itself, at its default guidance (generation_defaults) or at a sample prompt's own (Z-Image:
    # off at its default 0, on above it): sample previews then encode "" in phase 1 and pass it
    # through Family.pipeline_negative_kwargs, so a preview is exactly what inference renders
    # (SDXL's pipeline uses zeros for no negative prompt: it needs none)
    guides_with_negative: bool = False
    # how its pipeline guides at generation (the Generate form, GenerateBody, sample prompts):
    # "cfg" classifier-free guidance (guidance_scale), "true_cfg" the same through
    # true_cfg_scale (Qwen-Image), "embedded" a distilled guidance embedding (guidance_scale:
    # FLUX.1, FLUX.2; one pass, no negative prompt)
    guidance: Literal["cfg", "true_cfg", "embedded"] = "cfg"
    # its pipeline runs no classifier-free guidance for a step-distilled checkpoint (model_index
    # is_distilled true) at any scale (Flux2KleinPipeline's do_classifier_free_guidance): what a
    # run's sample prompt guidance is checked by before any pipeline loads (training/
    # guidance_rules.sample_guidance_problems; Generate asks the loaded pipeline itself)
    distilled_runs_no_cfg: bool = False
    # its pipeline takes a negative prompt (text) for its guidance; the contract suite checks
    # that __call__ has `negative_prompt` and the guidance keyword
    negative_prompt: bool = False
    # every joint attention call carries the text mask (Chroma's additive 0/1 float mask): flash
    # cannot take it and cuDNN's SDPA crashed on it (illegal memory access, H200, torch 2.11: bench
    # note 24), so attention "auto" runs the efficient kernel and "cudnn" is refused
    masked_attention: bool = False
    # the rules below are data so that /api/info serves them and the web form follows them; the
    # config parser applies them (config_resolve.spec_rule_problems), no hook repeats them:
    # attention_backend values it cannot run -> why (Chroma's masked attention refuses "cudnn")
    refused_attention: Mapping[str, str] = field(default_factory=dict)
    # the most tokens its text encoder reads (its pipeline's tokenizer limit): a larger
    # max_sequence_length is refused; None: no cap beyond the config's own
    max_sequence_length_max: int | None = None
    # why its pipeline takes no max_sequence_length (a family whose `supports` lacks it says why:
    # SDXL's CLIP reads a fixed 77 tokens); a generation asking for one is refused with it
    # (generation_rules.text_tokens_problems)
    no_max_sequence_length: str = ""
    # how a caption is measured against what its text encoder reads, so a run names the captions
    # cut short (training/inputs/caption_length.py); None: not measured
    caption_tokens: CaptionTokens | None = None
    # its encode_prompts pads every caption's embeddings to the token limit (caption_tokens.limit,
    # else max_sequence_length); False: cut to the caption's own tokens (Qwen-Image, Z-Image,
    # Krea 2, Qwen-Image-Edit), so the limit only bounds them (the host RAM forecast's text term)
    text_padded: bool = True
    # boolean settings it refuses turned on -> why (Qwen-Image-Edit's random_flip)
    refuses_on: Mapping[str, str] = field(default_factory=dict)
    # flavours of the architecture, read from the checkpoint (Variant); empty: one flavour
    variants: tuple[Variant, ...] = ()
    # (min, max) control (reference) images per training sample: (0, 0) text-to-image only;
    # an edit family reads their latents from batch_info["controls"] in predict (data/pairs.py)
    control_images: tuple[int, int] = (0, 0)
    # the smallest side in pixels the pipeline accepts for a reference image (FLUX.2: 64), so a
    # sample preview or generation at a smaller size is refused up front; 0: no limit
    min_reference_side: int = 0
    # the pipeline's encode_prompt reads the control images too (Qwen-Image-Edit's Qwen2.5-VL
    # sees them): conditioning is encoded per (caption, controls) and keyed by both
    # (training/inputs/conditioning.py cond_key); encode_prompts then takes `controls`
    prompt_sees_controls: bool = False
    # the size its edit pipeline encodes a reference (control) image at, from the image's own
    # aspect ratio (data/control_sizing.py): what TrainConfig.control_resolution "pipeline"
    # trains controls at; None for a family without control images
    control_sizing: ControlSizing | None = None
    # its checkpoints are released as editing models (FLUX.1 Kontext, Qwen-Image-Edit), though
    # some flavours also generate without a reference: the demo trains it on paired data
    edit_model: bool = False
    # the config.json facts its pipeline's components must agree on (families/config_rules.py),
    # checked by basemodels/agreement.py before any load: a component of another model is refused
    config_rules: tuple[ConfigRule, ...] = ()

    def public(self) -> dict[str, Any]:
        """A JSON-able description (for /api/info and the UI)."""
        return {
            "name": self.name,
            "title": self.title,
            "objective": self.objective,
            "latent_channels": self.latent_channels,
            "resolution_multiple": self.resolution_multiple,
            "lora_targets": list(self.lora_targets),
            "defaults": dict(self.defaults),
            "supports": sorted(self.supports),
            "wide_compile": bool(self.wide_compile_blocks),
            "fuse_projections": bool(self.fused_projection_groups),
            "variants": [v.title for v in self.variants],
            "control_images": list(self.control_images),
            "guidance": self.guidance,
            "guidance_default": self.generation_defaults.get(self.guidance_kwarg),
            "generation_side": self.generation_side,
            "generation_steps": self.generation_defaults.get("num_inference_steps"),
            "negative_prompt": self.negative_prompt,
            "attention_backends_refused": sorted(self.refused_attention),
            "max_sequence_length_max": self.max_sequence_length_max,
            "refuses_on": sorted(self.refuses_on),
        }

    @property
    def generation_side(self) -> int:
        """The width and height a generation that names none renders at (CLI `generate`, POST
        /api/generate, the web's Generate screen): the family's training resolution."""
        return int(self.defaults.get("resolution", 1024))

    @property
    def guidance_kwarg(self) -> str:
        """The pipeline __call__ keyword a guidance scale goes to."""
        return "true_cfg_scale" if self.guidance == "true_cfg" else "guidance_scale"
