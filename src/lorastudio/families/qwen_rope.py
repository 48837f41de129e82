"""Qwen-Image's rotary embedding in real arithmetic, so torch.compile can fuse it.

diffusers' Qwen-Image attention rotates queries and keys with complex tensors
(`apply_rotary_emb_qwen(..., use_real=False)`: view_as_complex, a complex multiply,
view_as_real). Inductor generates no code for complex ops: inside each compiled block it falls
back to eager kernels for them, with fp32 intermediates written out between its fused kernels,
for four tensors per block (image/text queries and keys), forward and backward, 60 blocks.
`real_rotary_emb` computes the same fp32 products with real tensors ((a + ib)(c + id) =
(ac - bd) + i(ad + bc)), which Inductor fuses into one kernel with the cast around it.

`use_real_rope()` installs it in place of diffusers' function (process-wide, idempotent): every
Qwen-Image model in the process then rotates with it, compiled or not, with the same values
(tests/unit/families/test_qwen_rope.py checks it against diffusers' complex path).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

log = logging.getLogger(__name__)

_ORIGINAL_ATTR = "_lorastudio_complex_rotary_emb"  # diffusers' own function, kept on its module


def real_rotary_emb(x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
    """Rotate x [B, S, H, D] (pairs (x[..., 2i], x[..., 2i+1]) as complex numbers) by the complex
    freqs_cis [S, D/2], in fp32, as diffusers' `apply_rotary_emb_qwen(x, freqs_cis,
    use_real=False)` does; returns [B, S, H, D] in x's dtype."""
    pairs = x.float().unflatten(-1, (-1, 2))  # [B, S, H, D/2, 2]
    x_re, x_im = pairs[..., 0], pairs[..., 1]  # [B, S, H, D/2] each
    freqs = torch.view_as_real(freqs_cis).unsqueeze(1)  # [S, 1, D/2, 2] fp32
    cos, sin = freqs[..., 0], freqs[..., 1]  # [S, 1, D/2] each
    out = torch.stack((x_re * cos - x_im * sin, x_re * sin + x_im * cos), dim=-1)  # [B, S, H, D/2, 2]
    return out.flatten(3).to(x.dtype)  # [B, S, H, D]


def _with_real_complex_path(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def apply_rotary_emb_qwen(
        x: torch.Tensor, freqs_cis: Any, use_real: bool = True, use_real_unbind_dim: int = -1
    ) -> torch.Tensor:
        if use_real or not (isinstance(freqs_cis, torch.Tensor) and freqs_cis.is_complex()):
            return original(x, freqs_cis, use_real=use_real, use_real_unbind_dim=use_real_unbind_dim)
        return real_rotary_emb(x, freqs_cis)

    apply_rotary_emb_qwen.__doc__ = "diffusers' apply_rotary_emb_qwen, its complex path in real arithmetic"
    setattr(apply_rotary_emb_qwen, _ORIGINAL_ATTR, original)
    return apply_rotary_emb_qwen


def use_real_rope() -> bool:
    """Make diffusers' Qwen-Image attention rotate with `real_rotary_emb` (idempotent). Returns
    whether it is in place; False (logged) when this diffusers has no `apply_rotary_emb_qwen` in
    its Qwen-Image module, so the model keeps its own rotation."""
    from diffusers.models.transformers import transformer_qwenimage as qwen

    current = getattr(qwen, "apply_rotary_emb_qwen", None)
    if current is None:
        log.info("Qwen-Image rotary embedding left as diffusers has it (no apply_rotary_emb_qwen)")
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
