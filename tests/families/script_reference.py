"""The denoiser call of one training step as diffusers' own training scripts write it
(examples/dreambooth/train_dreambooth_lora_{sdxl,flux,flux_kontext,flux2,flux2_img2img,
flux2_klein,qwen_image,krea2,z_image}.py) and, for the families without a script, as their
pipeline's __call__ does (ChromaPipeline): the prompt through the pipeline's encode_prompt, the
pipeline's packing and position-id helpers, the time input the script gives, the guidance, the
unpacking. Written from those files, never from lorastudio's hooks, for the maths audit
(tests/families/test_loss_reference.py).

Where the scripts and the pipelines disagree, the pipeline's inference wins (what a LoRA is
used with): FLUX.2's img2img script gives the b-th sample of a batch its reference at time
10 (b + 1) (`Flux2Pipeline._prepare_image_ids` over the batch's list), where the pipeline puts a
single reference at 10 for every image; here every sample's reference is at 10.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import torch

# the scripts' latent normalisations
KL_SHIFTED = {"flux", "flux-kontext", "chroma", "z-image"}  # (z - shift_factor) * scaling_factor
QWEN_VAE = {"qwen-image", "qwen-image-edit", "krea2"}  # (z - latents_mean) / latents_std, 5-D
BN_PATCHIFIED = {"flux2", "flux2-klein"}  # patchify 2x2, then the VAE's BatchNorm statistics
UNSHIFTED = {"flux", "flux-kontext"}  # FLUX.1's scripts and kohya: the sampled sigmas as they are
# families whose step this module writes out (Qwen-Image-Edit: no script; its pipeline's
# reference handling is checked against the hooks by tests/families/test_predict_matches_pipeline.py)
WRITTEN = {"sdxl", "flux", "flux-kontext", "chroma", "flux2", "flux2-klein", "qwen-image", "krea2", "z-image"}
DEFINED = WRITTEN | {"qwen-image-edit"}


def check_defined(family: str) -> None:
    """A family these definitions do not cover fails naming what to add: the audit's reference
    is written from the peers' definitions, so a new family brings its own here (the one piece
    of test code a family adds: src/lorastudio/families/README.md)."""
    assert family in DEFINED, (
        f"the maths audit has no reference for {family!r}: add its training script's latent "
        "normalisation, noise-level shift and denoiser call to tests/families/script_reference.py"
    )


def script_latents(family: str, vae, pixels: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """The training scripts' model_input of `pixels` [B, 3, H, W] with the posterior draw `eps`
    (the normalised latent's shape [B, C, h, w]): latent_dist.mean + latent_dist.std * eps,
    normalised as the family's script does. Returns [B, C, h, w] fp32."""
    from diffusers import Flux2Pipeline

    cfg = vae.config
    if family in QWEN_VAE:
        dist = vae.encode(pixels[:, :, None]).latent_dist  # [B, C, 1, h, w]
        z = dist.mean + dist.std * eps[:, :, None]  # [B, C, 1, h, w]
        mean = torch.tensor(cfg.latents_mean).view(1, cfg.z_dim, 1, 1, 1)
        inv_std = 1.0 / torch.tensor(cfg.latents_std).view(1, cfg.z_dim, 1, 1, 1)
        return ((z - mean) * inv_std)[:, :, 0]
    dist = vae.encode(pixels).latent_dist
    if family in BN_PATCHIFIED:
        z = Flux2Pipeline._patchify_latents(dist.mean) + Flux2Pipeline._patchify_latents(dist.std) * eps
        bn_mean = vae.bn.running_mean.view(1, -1, 1, 1)
        bn_std = torch.sqrt(vae.bn.running_var.view(1, -1, 1, 1) + cfg.batch_norm_eps)
        return (z - bn_mean) / bn_std
    # a KL VAE's 4-D posterior: the draw in its own (unnormalised) space
    z = dist.mean + dist.std * eps  # [B, C, h, w]
    if family in KL_SHIFTED:
        return (z - cfg.shift_factor) * cfg.scaling_factor
    assert family == "sdxl", family
    if getattr(cfg, "latents_mean", None) is not None and getattr(cfg, "latents_std", None) is not None:
        mean = torch.tensor(cfg.latents_mean).view(1, -1, 1, 1)
        std = torch.tensor(cfg.latents_std).view(1, -1, 1, 1)
        return (z - mean) * cfg.scaling_factor / std
    return z * cfg.scaling_factor


def script_sigmas(family: str, u: torch.Tensor, latent_hw: tuple[int, int], sched_cfg: dict) -> torch.Tensor:
    """Training sigmas of the sampled u [B] as the family's pipeline shifts its sigmas for an
    image of `latent_hw` latent cells (the normalised latent's shape)."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    if family in UNSHIFTED:
        return u
    sched = FlowMatchEulerDiscreteScheduler.from_config(sched_cfg)
    if not sched_cfg.get("use_dynamic_shifting"):
        shift = sched_cfg.get("shift", 1.0)  # the scheduler's own static shift of its sigmas
        return shift * u / (1 + (shift - 1) * u)
    # the pipeline's image sequence length: its packed tokens
    tokens = {
        "chroma": (latent_hw[0] // 2) * (latent_hw[1] // 2),
        "qwen-image": (latent_hw[0] // 2) * (latent_hw[1] // 2),
        "qwen-image-edit": (latent_hw[0] // 2) * (latent_hw[1] // 2),
        "krea2": (latent_hw[0] // 2) * (latent_hw[1] // 2),
        "flux2": latent_hw[0] * latent_hw[1],  # already 2x2-patchified
        "flux2-klein": latent_hw[0] * latent_hw[1],
    }[family]
    module = {
        "chroma": "diffusers.pipelines.chroma.pipeline_chroma",
        "qwen-image": "diffusers.pipelines.qwenimage.pipeline_qwenimage",
        "qwen-image-edit": "diffusers.pipelines.qwenimage.pipeline_qwenimage_edit",
        "krea2": "diffusers.pipelines.krea2.pipeline_krea2",
        # FLUX.2 trains with FLUX.1's calculate_shift (families/flux2.py: a deliberate choice,
        # Flux2Pipeline's compute_empirical_mu also depends on the inference step count)
        "flux2": "diffusers.pipelines.flux.pipeline_flux",
        "flux2-klein": "diffusers.pipelines.flux.pipeline_flux",
    }[family]
    calculate_shift = importlib.import_module(module).calculate_shift
    mu = calculate_shift(
        tokens,
        sched_cfg.get("base_image_seq_len", 256),
        sched_cfg.get("max_image_seq_len", 4096),
        sched_cfg.get("base_shift", 0.5),
        sched_cfg.get("max_shift", 1.15),
    )
    return sched.time_shift(mu, 1.0, u)


def reference_latents(family: str, vae: Any, pixels: torch.Tensor) -> torch.Tensor:
    """A reference (control) image's latents as the scripts and pipelines encode it: the
    posterior mode, normalised like the targets: pixels [B, 3, H, W] -> [B, C, h, w]."""
    from diffusers import Flux2Pipeline

    cfg = vae.config
    if family in BN_PATCHIFIED:
        z = Flux2Pipeline._patchify_latents(vae.encode(pixels).latent_dist.mode())
        bn_mean = vae.bn.running_mean.view(1, -1, 1, 1)
        bn_std = torch.sqrt(vae.bn.running_var.view(1, -1, 1, 1) + cfg.batch_norm_eps)
        return (z - bn_mean) / bn_std
    assert family in KL_SHIFTED, family
    return (vae.encode(pixels).latent_dist.mode() - cfg.shift_factor) * cfg.scaling_factor


def script_prediction(
    family: str,
    pipe: Any,
    noisy: torch.Tensor,
    level: torch.Tensor,
    prompts: Sequence[str],
    *,
    guidance: float | None,
    max_sequence_length: int | None,
    info: dict[str, Any],
    controls: torch.Tensor | None = None,
) -> torch.Tensor:
    """The scripts' model_pred [B, C, h, w] fp32 for `noisy` [B, C, h, w] (the normalised latent
    layout) at `level` [B] (sigmas; SDXL: integer timesteps), the batch's `prompts`, and for an
    edit, the reference latents `controls` [B, C, h', w'] (reference_latents)."""
    b, c, h, w = noisy.shape
    msl = max_sequence_length
    prompts = list(prompts)
    if family == "sdxl":
        embeds, _, pooled, _ = pipe.encode_prompt(
            prompt=prompts, device=noisy.device, num_images_per_prompt=1, do_classifier_free_guidance=False
        )
        target = tuple(info["target_size"])
        time_ids = torch.tensor(
            [
                list(o + cr + target)
                for o, cr in zip(info["original_size"], info["crop_top_left"], strict=True)
            ],
            dtype=noisy.dtype,
        )  # the script's compute_time_ids: original_size + crops_coords_top_left + target_size
        return pipe.unet(
            noisy,
            level,
            embeds,
            added_cond_kwargs={"time_ids": time_ids, "text_embeds": pooled},
            return_dict=False,
        )[0].float()

    timesteps = level * 1000  # the scripts' timesteps (sigmas x num_train_timesteps)
    if family in ("flux", "flux-kontext"):
        cls = type(pipe)
        embeds, pooled, text_ids = pipe.encode_prompt(prompt=prompts, prompt_2=None, max_sequence_length=msl)
        ids = cls._prepare_latent_image_ids(b, h // 2, w // 2, noisy.device, noisy.dtype)
        tokens = cls._pack_latents(noisy, b, c, h, w)
        n = tokens.shape[1]
        if controls is not None:
            cond_ids = cls._prepare_latent_image_ids(
                b, controls.shape[2] // 2, controls.shape[3] // 2, noisy.device, noisy.dtype
            )
            cond_ids[..., 0] = 1
            ids = torch.cat([ids, cond_ids], dim=0)
            packed = cls._pack_latents(controls, b, c, controls.shape[2], controls.shape[3])
            tokens = torch.cat([tokens, packed], dim=1)
        g = None
        if pipe.transformer.config.guidance_embeds:
            g = torch.tensor([guidance]).expand(b)
        pred = pipe.transformer(
            hidden_states=tokens,
            timestep=timesteps / 1000,
            guidance=g,
            pooled_projections=pooled,
            encoder_hidden_states=embeds,
            txt_ids=text_ids,
            img_ids=ids,
            return_dict=False,
        )[0][:, :n]
        vsf = pipe.vae_scale_factor
        return cls._unpack_latents(pred, height=h * vsf, width=w * vsf, vae_scale_factor=vsf).float()

    if family == "chroma":
        embeds, text_ids, mask, *_ = pipe.encode_prompt(
            prompt=prompts, do_classifier_free_guidance=False, max_sequence_length=msl
        )
        tokens = pipe._pack_latents(noisy, b, c, h, w)
        ids = pipe._prepare_latent_image_ids(b, h // 2, w // 2, noisy.device, noisy.dtype)
        attention = pipe._prepare_attention_mask(b, tokens.shape[1], noisy.dtype, mask)
        pred = pipe.transformer(
            hidden_states=tokens,
            timestep=timesteps / 1000,
            encoder_hidden_states=embeds,
            txt_ids=text_ids,
            img_ids=ids,
            attention_mask=attention,
            return_dict=False,
        )[0]
        vsf = pipe.vae_scale_factor
        return pipe._unpack_latents(pred, h * vsf, w * vsf, vsf).float()

    if family in BN_PATCHIFIED:
        from diffusers import Flux2Pipeline

        embeds, text_ids = pipe.encode_prompt(prompt=prompts, max_sequence_length=msl)
        ids = Flux2Pipeline._prepare_latent_ids(noisy)
        tokens = Flux2Pipeline._pack_latents(noisy)
        n = tokens.shape[1]
        if controls is not None:  # the pipeline's one reference per image, at time 10
            cond_ids = Flux2Pipeline._prepare_image_ids([controls[:1]]).expand(b, -1, -1)
            tokens = torch.cat([tokens, Flux2Pipeline._pack_latents(controls)], dim=1)
            ids = torch.cat([ids, cond_ids], dim=1)
        g = torch.full([1], guidance).expand(b) if pipe.transformer.config.guidance_embeds else None
        pred = pipe.transformer(
            hidden_states=tokens,
            timestep=timesteps / 1000,
            guidance=g,
            encoder_hidden_states=embeds,
            txt_ids=text_ids,
            img_ids=ids,
            return_dict=False,
        )[0][:, :n]
        return Flux2Pipeline._unpack_latents_with_ids(pred, ids[:, :n]).float()

    if family == "qwen-image":
        from diffusers import QwenImagePipeline

        embeds, mask = pipe.encode_prompt(prompt=prompts, max_sequence_length=msl)
        five = noisy[:, :, None].permute(0, 2, 1, 3, 4)  # the script's [B, 1, C, h, w]
        tokens = QwenImagePipeline._pack_latents(five, b, c, h, w)
        pred = pipe.transformer(
            hidden_states=tokens,
            encoder_hidden_states=embeds,
            encoder_hidden_states_mask=mask,
            timestep=timesteps / 1000,
            img_shapes=[(1, h // 2, w // 2)] * b,
            return_dict=False,
        )[0]
        vsf = pipe.vae_scale_factor
        return QwenImagePipeline._unpack_latents(pred, h * vsf, w * vsf, vsf)[:, :, 0].float()

    if family == "krea2":
        from diffusers import Krea2Pipeline

        embeds, mask = pipe.encode_prompt(prompt=prompts, max_sequence_length=msl)
        p = 2
        tokens = noisy.view(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5).reshape(b, -1, c * p * p)
        positions = Krea2Pipeline.prepare_position_ids(embeds.shape[1], h // p, w // p, noisy.device)
        pred = pipe.transformer(
            hidden_states=tokens,
            encoder_hidden_states=embeds,
            timestep=timesteps / 1000,
            position_ids=positions,
            encoder_attention_mask=mask,
            return_dict=False,
        )[0]
        pred = pred.view(b, h // p, w // p, c, p, p).permute(0, 3, 1, 4, 2, 5)
        return pred.reshape(b, c, h, w).float()

    if family == "z-image":
        embeds, _ = pipe.encode_prompt(
            prompt=prompts, do_classifier_free_guidance=False, max_sequence_length=msl
        )
        normalised = (1000 - timesteps) / 1000
        out = pipe.transformer(list(noisy[:, :, None].unbind(dim=0)), normalised, embeds, return_dict=False)[
            0
        ]
        return -torch.stack(out, dim=0)[:, :, 0].float()  # z-Image negates the prediction

    raise AssertionError(f"no script reference for {family}")
