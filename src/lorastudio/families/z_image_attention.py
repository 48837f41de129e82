"""Z-Image's attention processor with the rotary embedding in real arithmetic (families/real_rope.py
says why). `RealRopeZImageAttnProcessor.__call__` is diffusers' `ZSingleStreamAttnProcessor.__call__`
(diffusers 0.42) with its nested complex `apply_rotary_emb` replaced by `rotate_pairs`;
tests/families/test_real_rope.py checks that a model gives the same output with either."""

from __future__ import annotations

from typing import Any

import torch
from diffusers.models.attention_dispatch import dispatch_attention_fn
from diffusers.models.transformers.transformer_z_image import ZSingleStreamAttnProcessor

from lorastudio.families.real_rope import rotate_pairs


class RealRopeZImageAttnProcessor(ZSingleStreamAttnProcessor):
    """diffusers' Z-Image single-stream attention, rotating queries and keys with `rotate_pairs`."""

    def __call__(
        self,
        attn: Any,
        hidden_states: torch.Tensor,  # [B, S, dim]
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        freqs_cis: torch.Tensor | None = None,  # [B, S, D/2] complex
    ) -> torch.Tensor:
        query = attn.to_q(hidden_states).unflatten(-1, (attn.heads, -1))  # [B, S, H, D]
        key = attn.to_k(hidden_states).unflatten(-1, (attn.heads, -1))
        value = attn.to_v(hidden_states).unflatten(-1, (attn.heads, -1))
        if attn.norm_q is not None:
            query = attn.norm_q(query)
        if attn.norm_k is not None:
            key = attn.norm_k(key)
        if freqs_cis is not None:
            with torch.amp.autocast("cuda", enabled=False):
                query, key = rotate_pairs(query, freqs_cis), rotate_pairs(key, freqs_cis)
        if attention_mask is not None and attention_mask.ndim == 2:
            attention_mask = attention_mask[:, None, None, :]  # [B, 1, 1, S]
        hidden_states = dispatch_attention_fn(
            query,
            key,
            value,
            attn_mask=attention_mask,
            dropout_p=0.0,
            is_causal=False,
            backend=self._attention_backend,
            parallel_config=self._parallel_config,
        )  # [B, S, H, D]
        hidden_states = hidden_states.flatten(2, 3).to(query.dtype)  # [B, S, H * D]
        output = attn.to_out[0](hidden_states)
        if len(attn.to_out) > 1:  # dropout
            output = attn.to_out[1](output)
        return output
