"""The Family protocol: what the shared training loop needs to know about one model family.

A family is a declarative `FamilySpec` (families/spec.py: prediction objective, latent channels,
LoRA targets, default hyper-parameters, capabilities) plus typed hooks (load parts, encode prompts,
encode images, denoiser forward). Families never subclass or fork the loop: the loop in
`lorastudio.training` calls these hooks and nothing else family-specific.

Tensor conventions used by every hook:
  pixels      [B, 3, H, W]   float, in [-1, 1]
  latents     [B, C, h, w]   the family's *normalised* latent space (scaling/shift applied),
                             h = H / vae_scale_factor; 5-D VAEs squeeze their frame axis here
  conditioning  dict[str, Tensor] per caption, no batch axis; `collate_conditioning` batches them
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lorastudio.errors import FieldProblem, ModelSourceError
from lorastudio.families.flavours import FlavourHooks, config_facts  # noqa: F401 (re-exported)
from lorastudio.families.loading import load_component, quiet_loading  # noqa: F401 (re-exported)
from lorastudio.families.shifts import dynamic_shift_mu, static_shift, time_shift
from lorastudio.families.spec import CaptionTokens, FamilySpec, Objective, Variant  # noqa: F401 (re-exported)
from lorastudio.hub_token import hub_kwargs

if TYPE_CHECKING:
    import torch

    from lorastudio.config import TrainConfig
    from lorastudio.families.single_file import SingleFile

# A run's base is a pipeline folder or hub id (str), or a single-file checkpoint with its base
# config (SingleFile, families/single_file.py: model_source(cfg)); every hook that loads or
# reads the base takes both.


class Family(FlavourHooks, ABC):
    """Hooks of one family. Subclasses set `spec` and implement the abstract methods
    (encode_prompts, pipeline_prompt_kwargs, predict); loading the text encoders, the VAE and
    the denoiser, and KL-VAE encoding, follow from the spec unless a family overrides them.

    Each hook loads or computes one thing and returns it; none keeps hidden state between calls,
    so the loop can free what it no longer needs (text encoders after phase 1, VAE after phase 2).

    Optional hooks with defaults: config_problems, distilled (is the base step-distilled: read
    from the checkpoint), pipeline_negative_kwargs (previews of a pipeline that guides with a
    negative prompt, spec.guides_with_negative), to_pipeline_latents / from_pipeline_latents
    (the pipeline's own latent layout, e.g. packed tokens), adapt_denoiser, encode_pixels,
    collate_conditioning, shift_sigmas. The flavour hooks (checkpoint_facts, variant, pipeline_class,
    control_images, generation_defaults, ...) come from FlavourHooks (families/flavours.py).
    The contract suite (tests/families) checks every family
    through these hooks only: a new family adds no test code.
    """

    spec: FamilySpec

    # -- validation -------------------------------------------------------------------------
    def config_problems(self, cfg: TrainConfig) -> list[FieldProblem]:
        """Problems specific to this family beyond the generic checks (default: none)."""
        return []

    def distilled(self, source: str | SingleFile, revision: str | None) -> tuple[bool | None, str | None]:
        """Whether the base at `source` (a pipeline folder, or a hub id as preflight resolved
        it) is step-distilled (turbo / few-step: what TrainConfig.assistant_lora is for), and
        where that was read; (None, None) when nothing says. Default: model_index.json's
        `is_distilled` (absent: its pipeline's default), the flag variant rows such as
        flux2-klein's read too, else the known-checkpoint row of its hub repo
        (basemodels/checkpoints.py). A family whose checkpoints say it another way overrides this."""
        from lorastudio.basemodels.checkpoints import checkpoint_facts
        from lorastudio.basemodels.hubcache import cached_snapshot, is_hub_id
        from lorastudio.families.single_file import config_of

        source = config_of(source)  # a single file: its base config's
        folder = Path(source).expanduser()
        if folder.is_dir():
            facts = checkpoint_facts(folder)
        elif is_hub_id(source):
            facts = checkpoint_facts(cached_snapshot(source, revision), source)
        else:
            return None, None
        return facts.distilled, facts.distilled_from

    # -- phase 1: conditioning --------------------------------------------------------------
    def prepare_pipeline_loading(self) -> None:
        """Called by every path that loads this family's pipeline or its parts (engine, sample
        previews, generation) just before it does; never in the server, which must not import
        the pipeline libraries. Default: nothing (Qwen-Image-Edit: its processor's patch for
        hosts without torchvision)."""
        return None

    def load_text_encoders(
        self, source: str | SingleFile, revision: str | None, dtype: torch.dtype, device: torch.device
    ) -> Any:
        """Load tokenizers + text encoders (eval mode, no grad) from a pipeline folder or hub id
        (or a single file with its base config): the family's pipeline without its denoiser and
        VAE, so `encode_prompts` can use the pipeline's own encode_prompt and match inference
        exactly. Raises ModelSourceError."""
        import diffusers

        from lorastudio.families.common import load_text_pipeline
        from lorastudio.families.single_file import SingleFile, load_file_text_pipeline

        self.prepare_pipeline_loading()
        class_name = self.source_pipeline_class(source, revision)  # the checkpoint's flavour
        if isinstance(source, SingleFile):
            return load_file_text_pipeline(self.spec, source, revision, dtype, device, class_name)

        pipeline_cls = getattr(diffusers, class_name)
        skip = {self.spec.denoiser: None, "vae": None}
        return load_text_pipeline(pipeline_cls, source, revision, dtype, device, **skip)

    @abstractmethod
    def encode_prompts(
        self, encoders: Any, prompts: list[str], cfg: TrainConfig
    ) -> list[dict[str, torch.Tensor]]:
        """Encode each prompt; returns one dict of CPU tensors (no batch axis) per prompt.
        A family with spec.prompt_sees_controls also takes the keyword `controls`: per prompt,
        its control images (PIL RGB, slot order), which its pipeline's encode_prompt reads."""

    def collate_conditioning(self, items: list[dict[str, torch.Tensor]]) -> dict[str, Any]:
        """Batch per-caption conditioning (default: stack each key). Families with variable-length
        text pad here and return the mask too."""
        import torch

        return {k: torch.stack([it[k] for it in items]) for k in items[0]}

    @abstractmethod
    def pipeline_prompt_kwargs(
        self, cond: dict[str, Any], device: torch.device, dtype: torch.dtype
    ) -> dict[str, Any]:
        """The family pipeline's `__call__` keyword arguments (prompt_embeds and friends) for the
        collated conditioning of ONE prompt (`collate_conditioning([item])`), moved to
        device/dtype, so a pipeline without text encoders renders exactly what the prompt
        would render (sample previews)."""

    def pipeline_negative_kwargs(
        self, cond: dict[str, Any], device: torch.device, dtype: torch.dtype
    ) -> dict[str, Any]:
        """Like pipeline_prompt_kwargs, for the negative prompt of classifier-free guidance
        (negative_prompt_embeds and friends), from the collated conditioning of "". Only
        families with spec.guides_with_negative are asked. Default: none."""
        return {}

    def render_without_references(self, pipe: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The pipeline and kwargs (`prompt` or its pipeline_prompt_kwargs) that render a prompt
        without references on an edit family's `pipe`. Default: both as they are (image=None);
        Qwen-Image-Edit-Plus, whose __call__ needs an image: a text-to-image pipeline on its parts."""
        return pipe, kwargs

    def render_sized_references(
        self, pipe: Any, kwargs: dict[str, Any], references: Sequence[Any]
    ) -> tuple[Any, dict[str, Any]]:
        """The pipeline (a callable) and kwargs that render an edit with each reference of
        kwargs["image"] (already sized as a run trains it: data/control_sizing.py) encoded at the
        size handed; `references`: the same images as the run's text encoder reads them (for a
        `prompt` text left in kwargs, where the prompt sees controls). Default: both as they are
        (FLUX.1 Kontext with _auto_resize off and FLUX.2 under its area cap encode a reference at
        its size); Qwen-Image-Edit, whose pipelines resize to ~1 MP: families/qwen_edit_render.py."""
        return pipe, kwargs

    # -- phase 2: latents ----------------------------------------------------------------------
    def load_vae(
        self, source: str | SingleFile, revision: str | None, dtype: torch.dtype, device: torch.device
    ) -> Any:
        """Load the VAE (spec.vae_class; eval mode, no grad; fp32 when spec.vae_in_fp32), from
        a single file when it holds one. Raises ModelSourceError."""
        import diffusers
        import torch

        from lorastudio.families.common import frozen
        from lorastudio.families.single_file import SingleFile, load_file_component

        vae_dtype = torch.float32 if self.spec.vae_in_fp32 else dtype
        cls = getattr(diffusers, self.spec.vae_class)
        if isinstance(source, SingleFile):
            vae = load_file_component(cls, source, "vae", revision, vae_dtype)
        else:
            vae = load_component(cls, source, "vae", revision, dtype=vae_dtype)
        return frozen(vae, device)

    def encode_pixels(self, vae: Any, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """pixels [B,3,H,W] in [-1,1] -> (mean, std) of the posterior in the normalised latent
        space, each [B,C,h,w] float32. A latent sample is mean + std * randn. Default: a KL VAE
        normalised with its scaling/shift factors, as the pipelines do."""
        import torch

        from lorastudio.families.common import kl_posterior

        with torch.no_grad():
            return kl_posterior(vae, pixels)

    def encode_controls(self, vae: Any, pixels: torch.Tensor) -> torch.Tensor:
        """Control (reference) images [N,3,H,W] in [-1,1] -> their latents [N,C,h,w] float32 in
        the normalised latent space, as the family's edit pipeline encodes a reference image.
        Controls are not noised. Default: the posterior mean (the pipelines' "argmax" mode).
        Only called for families whose spec.control_images allows controls; predict receives
        them as batch_info["controls"] [B, K, C, h, w] (K controls per sample, slot order)."""
        return self.encode_pixels(vae, pixels)[0]

    def reference_pixels(self, image: Any, width: int, height: int) -> torch.Tensor:
        """A reference (control) PIL image as the family's edit pipeline prepares it for its VAE
        when asked for a width x height output: [3, H, W] float32 in [-1, 1]. Default: fitted to
        width x height (resized to cover, centre-cropped: generate.references.fit_reference), as the
        Kontext pipeline takes a reference of the output's size. The contract suite encodes it
        with encode_controls to check predict against the pipeline."""
        import numpy as np
        import torch

        from lorastudio.generate.references import fit_reference

        arr = np.asarray(fit_reference(image, width, height), dtype=np.float32)  # [H, W, 3]
        return torch.from_numpy(arr.transpose(2, 0, 1).copy()) / 127.5 - 1.0  # [3, H, W]

    # -- phase 3: denoiser -----------------------------------------------------------------------
    def load_denoiser(
        self, source: str | SingleFile, revision: str | None, dtype: torch.dtype, device: torch.device
    ) -> Any:
        """Load the denoiser (spec.denoiser_class from the spec.denoiser subfolder, or from a
        single file; frozen, eval mode; adapt_denoiser applied; the loop adds the LoRA).
        Raises ModelSourceError."""
        import diffusers

        from lorastudio.families.common import frozen
        from lorastudio.families.single_file import SingleFile, load_file_component

        cls = getattr(diffusers, self.spec.denoiser_class)
        if isinstance(source, SingleFile):
            loaded = load_file_component(cls, source, self.spec.denoiser, revision, dtype)
        else:
            loaded = load_component(cls, source, self.spec.denoiser, revision, dtype=dtype)
        denoiser = frozen(loaded, device)
        self.adapt_denoiser(denoiser)
        return denoiser

    def adapt_denoiser(self, denoiser: Any) -> None:
        """Change a just-built denoiser in place in ways that keep its outputs (e.g. a faster
        formulation of the same maths); called by load_denoiser. Default: nothing."""
        return None

    @abstractmethod
    def predict(
        self,
        denoiser: Any,
        noisy: torch.Tensor,
        noise_level: torch.Tensor,
        cond: dict[str, Any],
        batch_info: Mapping[str, Any],
        cfg: TrainConfig,
    ) -> torch.Tensor:
        """One denoiser forward. noisy [B,C,h,w] in the training dtype; noise_level [B]
        (DDPM: integer timesteps; flow: sigma in [0,1], 1 = pure noise); cond is the output of
        collate_conditioning; batch_info = {"original_size": [(h, w)] * B, "crop_top_left":
        [(top, left)] * B, "target_size": (H, W)} in pixels, plus "controls" [B, K, C, h, w]
        (training dtype, on the device; see encode_controls) for a paired dataset. Returns the
        prediction [B,C,h,w] in the objective's target space: epsilon or v for DDPM (per the
        scheduler config), noise - x0 for flow."""

    def to_pipeline_latents(self, pipe: Any, latents: torch.Tensor) -> torch.Tensor:
        """latents [B,C,h,w] (normalised) -> what `pipe`'s `latents=` argument takes (packed
        tokens for the patched transformers; `pipe` for what the layout needs, e.g. its
        denoiser's patch size). Default: the same tensor."""
        return latents

    def from_pipeline_latents(self, pipe: Any, out: torch.Tensor, latent_hw: tuple[int, int]) -> torch.Tensor:
        """Inverse of to_pipeline_latents: `pipe`'s output_type="latent" result -> latents
        [B,C,h,w] in the family's latent space (latent_hw = (h, w); `pipe` for what the
        conversion needs, e.g. its VAE's statistics or its denoiser's patch size). Default: as is."""
        return out

    # -- noise schedule ------------------------------------------------------------------------
    def objective_problems(self, source: str | SingleFile, revision: str | None) -> list[FieldProblem]:
        """Why this base cannot be trained with the family's objective (field `base_model`):
        its checkpoint was trained with another one, so a LoRA trained here would be wrong at
        inference. Read from the base's configs before any load (preflight); a config that
        cannot be read says nothing here (the loaders name it). Default: none (SDXL checks its
        scheduler and VAE)."""
        return []

    def scheduler_config(self, source: str | SingleFile, revision: str | None) -> dict[str, Any]:
        """The base model's scheduler config (scheduler/scheduler_config.json) as a dict; a
        single file's: its base config's with the file's prediction type (scheduler_overrides).
        Raises ModelSourceError when it cannot be read."""
        from diffusers import DDPMScheduler  # any scheduler class reads scheduler_config.json

        from lorastudio.families.single_file import config_of, scheduler_overrides

        try:
            found = DDPMScheduler.load_config(
                config_of(source), subfolder="scheduler", revision=revision, **hub_kwargs()
            )
            return {**dict(found), **scheduler_overrides(source)}
        except (OSError, ValueError) as err:
            raise ModelSourceError(f"cannot read the scheduler config of {source!r}: {err}") from err

    def shift_sigmas(
        self,
        sigmas: torch.Tensor,
        latent_hw: tuple[int, int],
        cfg: TrainConfig,
        scheduler_config: Mapping[str, Any],
    ) -> torch.Tensor:
        """Flow families: map sampled sigmas [B] (in (0,1)) to the training sigmas [B].

        Default: cfg.flow_shift if set (static shift s*x / (1 + (s-1)*x)); otherwise shift the
        way the family's pipeline does at inference for this image size: dynamic (mu from the
        packed image sequence length, exponential or linear time shift) when the scheduler
        config says use_dynamic_shifting, else its static `shift`."""
        if cfg.flow_shift is not None:
            return static_shift(sigmas, cfg.flow_shift)
        if scheduler_config.get("use_dynamic_shifting"):
            p = self.spec.patch_size
            seq_len = (latent_hw[0] // p) * (latent_hw[1] // p)  # image tokens
            mu = dynamic_shift_mu(seq_len, scheduler_config)
            return time_shift(sigmas, mu, scheduler_config.get("time_shift_type", "exponential"))
        return static_shift(sigmas, float(scheduler_config.get("shift", 1.0)))
