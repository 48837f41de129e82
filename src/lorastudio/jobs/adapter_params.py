"""Trainable parameters of one adapted linear layer, per adapter kind, for the memory forecasts
(jobs/vram_estimate.py, jobs/host_memory.py: fp32 weights, gradients and optimizer state of
the adapter). Counted from the layer's shape as peft builds each adapter (no torch, no peft
import: the server's forecasts stay light):

  lora  r x (in + out)                    dora  r x (in + out) + out (the magnitude per output row)
  loha  2 x r x (in + out)                (hada_w1_a / w1_b and hada_w2_a / w2_b)
  lokr  w1 [a, c] (or r x (a + c) with decompose_both where r < max(a, c) / 2) plus w2 [b, d]
        (r x (b + d) where r < max(b, d) / 2), out = a x b and in = c x d by peft's factorization.
A convolution a target names (SDXL's resnet `conv1`, `conv2`, `conv_shortcut`) counts as a linear
layer whose input is in x its kernel's size (w2's d x kernel for LoKr): it counted 0 before.

A full-matrix LoKr (a rank of half its factors' size or more, how an imported LyCORIS
`linear_dim` of 10000 is held: config_import/simpletuner_lycoris.py) is a few thousand
parameters a layer where a LoRA of that rank would be millions: counting it as one made the
forecast of such a run tens of GB too high.

Why hand-written: peft's `factorization` is restated (tuners/lokr/layer.py, peft 0.17), so the
server's forecast does not import peft and torch.
"""

from __future__ import annotations


def factorization(dimension: int, factor: int = -1) -> tuple[int, int]:
    """peft's LoKr factorization of `dimension` into (m, n): (factor, dimension / factor) where
    the factor divides it, m > n included (peft keeps that order; LyCORIS' own rule swaps it to
    m <= n: RELIABILITY's Known problems); else m <= n with m the largest divisor up to the
    factor that keeps m + n falling (-1: as square as possible)."""
    if factor > 0 and dimension % factor == 0:
        return factor, dimension // factor
    if factor == -1:
        factor = dimension
    m, n = 1, dimension
    length = m + n
    while m < n:
        new_m = m + 1
        while dimension % new_m != 0:
            new_m += 1
        new_n = dimension // new_m
        if new_m + new_n > length or new_m > factor:
            break
        m, n = new_m, new_n
    return (n, m) if m > n else (m, n)


def layer_params(
    adapter: str,
    rank: int,
    out_dim: int,
    in_dim: int,
    factor: int | None = None,
    decompose_both: bool = False,
    kernel: int = 1,
) -> int:
    """The trainable parameters `adapter` ("lora", "dora", "loha", "lokr") adds to an [out, in]
    linear layer at `rank` (LoKr: lokr_factor `factor`, None = -1, and lokr_decompose_both), or
    to a convolution of weight [out, in, *k] with `kernel` = the product of k: peft (without
    use_effective_conv2d, as lora_config_for builds) flattens its input axis to in x kernel for
    LoRA / DoRA / LoHa, and for LoKr factorizes out and in, w2's input side then times kernel."""
    if adapter == "loha":
        return 2 * rank * (in_dim * kernel + out_dim)
    if adapter == "lokr":
        a, b = factorization(out_dim, -1 if factor is None else factor)
        c, d = factorization(in_dim, -1 if factor is None else factor)
        w1 = rank * (a + c) if decompose_both and rank < max(a, c) / 2 else a * c
        w2 = rank * (b + d * kernel) if rank < max(b, d) / 2 else b * d * kernel
        return w1 + w2
    return rank * (in_dim * kernel + out_dim) + (out_dim if adapter == "dora" else 0)
