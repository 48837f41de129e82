"""Pieces shared by several families: latent packing, the FLUX.1-style DiT call, KL-VAE posterior
normalisation and text-only pipeline loading. Pure functions; no family knows another family.
Importing it imports no torch (the family specs are read by the server): a function that needs
torch imports it where it runs, and `no_grad` is torch.no_grad applied at call time."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from lorastudio.errors import ModelSourceError
from lorastudio.families.base import config_facts, quiet_loading
from lorastudio.hub_token import hub_kwargs
from lorastudio.open_reason import library_open_reason

if TYPE_CHECKING:
    import torch

F = TypeVar("F", bound=Callable[..., Any])

# the q/k/v projections of a dual-stream (MM-DiT) block: image stream, then text stream; each
# triple reads one input (FamilySpec.fused_projection_groups of FLUX.1 and Qwen-Image)
DUAL_STREAM_QKV = (
    ("attn.to_q", "attn.to_k", "attn.to_v"),
    ("attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"),
)


def no_grad(fn: F) -> F:
    """`fn` run under torch.no_grad(), torch imported at the call (not when the family module is
    imported: the spec lookups of the server stay torch-free)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        import torch

        with torch.no_grad():
            return fn(*args, **kwargs)

    return run  # type: ignore[return-value]


def pack_2x2(latents: torch.Tensor) -> torch.Tensor:
    """[B, C, h, w] -> [B, (h/2)*(w/2), C*4]: the 2x2 patch packing of FLUX.1 / Qwen-Image."""
    b, c, h, w = latents.shape
    x = latents.view(b, c, h // 2, 2, w // 2, 2)  # [B, C, h/2, 2, w/2, 2]
    x = x.permute(0, 2, 4, 1, 3, 5)  # [B, h/2, w/2, C, 2, 2]
    return x.reshape(b, (h // 2) * (w // 2), c * 4)


def unpack_2x2(packed: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """Inverse of pack_2x2: [B, (h/2)*(w/2), C*4] -> [B, C, h, w]."""
    b, _, c4 = packed.shape
    c = c4 // 4
    x = packed.view(b, h // 2, w // 2, c, 2, 2)  # [B, h/2, w/2, C, 2, 2]
    x = x.permute(0, 3, 1, 4, 2, 5)  # [B, C, h/2, 2, w/2, 2]
    return x.reshape(b, c, h, w)


def pack_patches(latents: torch.Tensor, p: int) -> torch.Tensor:
    """[B, C, h, w] -> [B, (h/p)*(w/p), C*p*p]: pack_2x2 for any patch side p (Krea 2's)."""
    b, c, h, w = latents.shape
    x = latents.view(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)  # [B, h/p, w/p, C, p, p]
    return x.reshape(b, (h // p) * (w // p), c * p * p)


def unpack_patches(packed: torch.Tensor, h: int, w: int, p: int) -> torch.Tensor:
    """Inverse of pack_patches: [B, (h/p)*(w/p), C*p*p] -> [B, C, h, w]."""
    b, _, cpp = packed.shape
    x = packed.view(b, h // p, w // p, cpp // (p * p), p, p).permute(
        0, 3, 1, 4, 2, 5
    )  # [B, C, h/p, p, w/p, p]
    return x.reshape(b, cpp // (p * p), h, w)


def kl_posterior(vae: Any, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """AutoencoderKL posterior of pixels [B,3,H,W] in [-1,1], normalised like the pipelines do
    (z - shift_factor) * scaling_factor. Returns (mean, std), each [B, C, h, w] float32."""
    dist = vae.encode(pixels.to(vae.dtype)).latent_dist
    scale = float(vae.config.scaling_factor)
    shift = float(vae.config.shift_factor or 0.0)
    mean = (dist.mean.float() - shift) * scale  # [B, C, h, w]
    std = dist.std.float() * scale  # [B, C, h, w]
    return mean, std


@no_grad
def qwen_vae_posterior(vae: Any, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """AutoencoderKLQwenImage posterior of pixels [B,3,H,W] in [-1,1] (one frame of its 5-D
    input), normalised with its per-channel latents_mean / latents_std as the Qwen-Image and
    Krea 2 pipelines do. Returns (mean, std), each [B, C, h, w] float32."""
    import torch

    dist = vae.encode(pixels.to(vae.dtype)[:, :, None]).latent_dist  # 5-D: [B, 3, 1, H, W] in
    shape = (1, -1, 1, 1)
    stats = {"dtype": torch.float32, "device": pixels.device}
    lat_mean = torch.tensor(vae.config.latents_mean, **stats).view(shape)  # [1, C, 1, 1]
    lat_std = torch.tensor(vae.config.latents_std, **stats).view(shape)  # [1, C, 1, 1]
    mean = (dist.mean[:, :, 0].float() - lat_mean) / lat_std  # [B, C, h, w]
    std = dist.std[:, :, 0].float() / lat_std  # [B, C, h, w]
    return mean, std


def load_text_pipeline(
    pipeline_cls: Any,
    source: str,
    revision: str | None,
    dtype: torch.dtype,
    device: torch.device,
    **skip: None,
) -> Any:
    """Load a pipeline with only its text parts (tokenizers, text encoders, scheduler): the
    components named in `skip` (e.g. transformer=None, vae=None) are not loaded. The pipeline's
    own encode_prompt then encodes exactly as inference does. Raises ModelSourceError."""
    quiet_loading()
    try:
        pipe = pipeline_cls.from_pretrained(source, revision=revision, dtype=dtype, **hub_kwargs(), **skip)
    except (OSError, ValueError, KeyError) as err:
        raise ModelSourceError(
            f"cannot load the text encoders of {source!r}: {library_open_reason(err)}"
        ) from err
    pipe.to(device)
    for name in ("text_encoder", "text_encoder_2", "text_encoder_3"):
        module = getattr(pipe, name, None)
        if module is not None:
            module.eval().requires_grad_(False)
    return pipe


def pipeline_facts(pipe: Any, denoiser_name: str) -> dict[str, Any]:
    """config_facts of a loaded pipeline (its config, its class as `_class_name`, its denoiser's)."""
    index = {**pipe.config, "_class_name": type(pipe).__name__}
    return config_facts(index, denoiser_name, getattr(pipe, denoiser_name).config)


def frozen(module: Any, device: torch.device) -> Any:
    """Move a loaded model to device, eval mode, no gradients; returns it."""
    return module.to(device).eval().requires_grad_(False)


def flux_dit_predict(
    denoiser: Any, pipeline_cls: Any, noisy: torch.Tensor, embeds: torch.Tensor, **inputs: Any
) -> torch.Tensor:
    """One forward of a FLUX.1-style MM-DiT (FLUX.1, Chroma) on noisy latents [B, C, h, w]: packs
    them 2x2, builds the image position ids with `pipeline_cls._prepare_latent_image_ids` (the
    pipeline's own) and all-zero text ids for `embeds` [B, L, D], passes `inputs` (timestep and
    the family's conditioning) through, and unpacks the prediction. Returns [B, C, h, w]."""
    import torch

    b, _, h, w = noisy.shape
    dtype, device = noisy.dtype, noisy.device
    img_ids = pipeline_cls._prepare_latent_image_ids(b, h // 2, w // 2, device, dtype)  # [hw/4, 3]
    txt_ids = torch.zeros(embeds.shape[1], 3, device=device, dtype=dtype)  # [L, 3]
    out = denoiser(
        hidden_states=pack_2x2(noisy),  # [B, hw/4, C*4]
        encoder_hidden_states=embeds,
        txt_ids=txt_ids,
        img_ids=img_ids,
        return_dict=False,
        **inputs,
    )[0]
    return unpack_2x2(out, h, w)  # [B, C, h, w]


class Packed2x2Latents:
    """Family mixin: the pipeline's latents are pack_2x2 tokens [B, hw/4, C*4] (FLUX.1,
    Qwen-Image, Chroma): Family.to_pipeline_latents / from_pipeline_latents."""

    def to_pipeline_latents(self, pipe: Any, latents: torch.Tensor) -> torch.Tensor:
        return pack_2x2(latents)  # [B, hw/4, C*4]

    def from_pipeline_latents(self, pipe: Any, out: torch.Tensor, latent_hw: tuple[int, int]) -> torch.Tensor:
        return unpack_2x2(out, *latent_hw)  # [B, C, h, w]


@contextmanager
def without_cudnn(masked: bool) -> Iterator[None]:
    """Keep cuDNN's SDPA out of the attention calls made inside (forward, and so their backward)
    when `masked`: a batch whose captions differ in length hands attention a text mask, which
    cuDNN's SDPA crashed on (bench note 24). A no-op when unmasked or cuDNN is not enabled."""
    import torch

    if not masked or not torch.backends.cuda.cudnn_sdp_enabled():
        yield
        return
    torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        yield
    finally:
        torch.backends.cuda.enable_cudnn_sdp(True)
