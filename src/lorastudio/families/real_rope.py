"""Rotary embeddings in real arithmetic for Qwen-Image and Z-Image, so torch.compile can fuse them.

diffusers' Qwen-Image and Z-Image attention rotate queries and keys with complex tensors
(view_as_complex, a complex multiply, view_as_real). Inductor generates no code for complex
ops: inside each compiled block it falls back to eager kernels for them, with fp32
intermediates written out between its fused kernels, for every query and key, forward and
backward, in every block. `rotate_pairs` computes the same fp32 products with real tensors
((a + ib)(c + id) = (ac - bd) + i(ad + bc)), which Inductor fuses into one kernel with the casts
around it.

- Qwen-Image: `use_real_rope()` puts it in place of diffusers' `apply_rotary_emb_qwen`
  (process-wide, idempotent): every Qwen-Image model in the process then rotates with it,
  compiled or not, with the same values.
- Z-Image: its rotation is a function nested in `ZSingleStreamAttnProcessor.__call__`, so
  `use_real_rope_processors(model)` gives the model's attention modules
  `RealRopeZImageAttnProcessor`, the same processor with `rotate_pairs`.
tests/families/test_real_rope.py checks both against diffusers' complex paths.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


log = logging.getLogger(__name__)

_ORIGINAL_ATTR = "_lorastudio_complex_rotary_emb"  # diffusers' own function, kept on its module
_QWEN_PARAMS = ["x", "freqs_cis", "use_real", "use_real_unbind_dim"]  # apply_rotary_emb_qwen's
# sha256 (first 16 hex digits, white space folded) of the ZSingleStreamAttnProcessor.__call__ source
# that RealRopeZImageAttnProcessor reproduces (diffusers 0.42.1); another source keeps diffusers' own
Z_IMAGE_VERIFIED_CALLS = frozenset({"9e56cdb0938c85b9"})


def rotate_pairs(x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
    """Rotate x [B, S, H, D] (pairs (x[..., 2i], x[..., 2i+1]) as complex numbers) by the complex
    freqs_cis [S, D/2] or [B, S, D/2] (no head axis: the same rotation for every head), in fp32,
    as `view_as_real(view_as_complex(x.float()...) * freqs_cis[..., None, :]).flatten(3)
    .type_as(x)` does; returns [B, S, H, D] in x's dtype. No complex tensor is created: the
    complex input is only viewed as real pairs."""
    import torch

    pairs = x.float().unflatten(-1, (-1, 2))  # [B, S, H, D/2, 2]
    x_re, x_im = pairs[..., 0], pairs[..., 1]  # [B, S, H, D/2] each
    freqs = torch.view_as_real(freqs_cis).unsqueeze(-3)  # [(B,) S, 1, D/2, 2] fp32
    cos, sin = freqs[..., 0], freqs[..., 1]  # [(B,) S, 1, D/2] each
    out = torch.stack((x_re * cos - x_im * sin, x_re * sin + x_im * cos), dim=-1)  # [B, S, H, D/2, 2]
    return out.flatten(3).to(x.dtype)  # [B, S, H, D]


def _with_real_complex_path(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    import torch

    def apply_rotary_emb_qwen(
        x: torch.Tensor, freqs_cis: Any, use_real: bool = True, use_real_unbind_dim: int = -1
    ) -> torch.Tensor:
        if use_real or not (isinstance(freqs_cis, torch.Tensor) and freqs_cis.is_complex()):
            return original(x, freqs_cis, use_real=use_real, use_real_unbind_dim=use_real_unbind_dim)
        return rotate_pairs(x, freqs_cis)  # freqs_cis [S, D/2]

    apply_rotary_emb_qwen.__doc__ = "diffusers' apply_rotary_emb_qwen, its complex path in real arithmetic"
    setattr(apply_rotary_emb_qwen, _ORIGINAL_ATTR, original)
    return apply_rotary_emb_qwen


def use_real_rope() -> bool:
    """Make diffusers' Qwen-Image attention rotate with `rotate_pairs` (idempotent). Returns
    whether it is in place; False (logged) when this diffusers has no `apply_rotary_emb_qwen`
    with the parameters it was written against, so the model keeps its own rotation."""
    from diffusers.models.transformers import transformer_qwenimage as qwen

    current = getattr(qwen, "apply_rotary_emb_qwen", None)
    original = getattr(current, _ORIGINAL_ATTR, current)
    if original is None or list(inspect.signature(original).parameters) != _QWEN_PARAMS:
        log.info("Qwen-Image rotary embedding left as diffusers has it (apply_rotary_emb_qwen differs)")
        return False
    if not hasattr(current, _ORIGINAL_ATTR):
        qwen.apply_rotary_emb_qwen = _with_real_complex_path(current)
    return True


def use_complex_rope() -> None:
    """Put diffusers' own function back (for comparisons: bench, tests)."""
    from diffusers.models.transformers import transformer_qwenimage as qwen

    original = getattr(getattr(qwen, "apply_rotary_emb_qwen", None), _ORIGINAL_ATTR, None)
    if original is not None:
        qwen.apply_rotary_emb_qwen = original


def _swap_processors(model: torch.nn.Module, old_type: type, new_type: type) -> int:
    """Give every module of `model` whose processor is exactly `old_type` a `new_type()` instead
    (keeping the attention backend and parallel config set on the old one); returns how many."""
    swapped = 0
    for module in model.modules():
        old = getattr(module, "processor", None)
        if type(old) is old_type:
            new = new_type()
            for attr in ("_attention_backend", "_parallel_config"):
                if attr in vars(old):
                    setattr(new, attr, getattr(old, attr))
            module.processor = new
            swapped += 1
    return swapped


def source_digest(fn: Callable[..., Any]) -> str:
    """The first 16 hex digits of the sha256 of `fn`'s source with white space folded."""
    return hashlib.sha256(" ".join(inspect.getsource(fn).split()).encode()).hexdigest()[:16]


def use_real_rope_processors(model: torch.nn.Module) -> int:
    """Give every attention module of a Z-Image transformer whose processor is diffusers'
    `ZSingleStreamAttnProcessor` a `RealRopeZImageAttnProcessor`, when diffusers' `__call__` is
    the one that class reproduces (Z_IMAGE_VERIFIED_CALLS; else nothing changes, logged).
    Returns how many were replaced."""
    from diffusers.models.transformers.transformer_z_image import ZSingleStreamAttnProcessor

    from lorastudio.families.z_image_attention import RealRopeZImageAttnProcessor

    if source_digest(ZSingleStreamAttnProcessor.__call__) not in Z_IMAGE_VERIFIED_CALLS:
        log.info("Z-Image attention left as diffusers has it (its processor is not the verified one)")
        return 0
    return _swap_processors(model, ZSingleStreamAttnProcessor, RealRopeZImageAttnProcessor)


def use_complex_rope_processors(model: torch.nn.Module) -> int:
    """Undo `use_real_rope_processors` (for comparisons: bench, tests); returns how many."""
    from diffusers.models.transformers.transformer_z_image import ZSingleStreamAttnProcessor

    from lorastudio.families.z_image_attention import RealRopeZImageAttnProcessor

    return _swap_processors(model, RealRopeZImageAttnProcessor, ZSingleStreamAttnProcessor)
