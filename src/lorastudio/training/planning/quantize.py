"""The frozen base in fp8 compute or quantised (int8 / nf4, QLoRA), through torchao; never fatal.

Which layers change: the frozen nn.Linear layers of the denoiser's repeated blocks (diffusers'
`_repeated_blocks`): attention projections, MLPs and the blocks' AdaLN modulation linears, nearly
all of a transformer's weights (the U-Net keeps its convolutions). The rest stays in the compute
dtype (bf16): the patch / text / timestep embedders, the final norm and proj_out (a few % of the
weights, touching the latents and conditioning directly, where quantisation error costs most),
norms (vectors) and convolutions (torchao quantises linears). A block layer a format cannot hold
stays bf16 too (nf4: whole 64-weight blocks; fp8: dims multiples of 16, _scaled_mm's rule): tiny
models have such layers, the real bases do not.

- int8: per-output-row symmetric int8 (torchao Int8Tensor, as Int8WeightOnlyConfig), ~0.5x bf16.
- nf4: torchao NF4Tensor (QLoRA's NormalFloat4, 64-weight blocks, double-quantised scales),
  ~0.26x bf16. Both run through `QuantisedLinear`: its autograd function saves only the
  quantised weight and dequantises it again for the input gradient, so nothing bf16-sized lives
  from forward to backward, and there is no weight-gradient matmul.
- fp8: training/speed/fp8.py's Fp8FrozenLinear: torchao's ROWWISE float8 recipe (e4m3, a scale per row
  of each operand) for a FROZEN weight: diffusion transformers carry outlier tokens and channels
  that one per-tensor scale (tensorwise) would crush into a few fp8 levels. The weight is cast
  once at conversion (both layouts the forward and the input-gradient matmuls need, 2 bytes per
  weight, the bf16 copy dropped), there is no weight-gradient matmul and no saved input: torchao's
  own Float8Linear, built for full fine-tuning, recasts the weight every call, computes the
  weight gradient and keeps the input (bench/RESULTS.md: +14 % FLUX.1, +18 % Z-Image, +6 %
  Qwen-Image over compiled bf16 on an H200). A one-layer probe runs on the device first.

Placement: the model moves to `device` one module at a time (each block linear is quantised on the
device right after its bf16 weight arrives), so the device never holds the whole bf16 model;
modules inside `stay_on_cpu` (a block swap's blocks) are converted too (their layers quantised on
the device, one at a time, then moved back) but stay in CPU RAM.
Call this before peft adds the LoRA: peft wraps the converted layers as any nn.Linear (its
TorchaoLoraLinear for Int8Tensor weights); the LoRA A/B stay fp32 and trainable.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Collection, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from lorastudio.training.precision import QUANTISED, fp8_capable
from lorastudio.training.speed.compile import repeated_blocks
from lorastudio.training.speed.fp8 import Fp8FrozenLinear

log = logging.getLogger(__name__)

NF4_BLOCK = 64  # weights per nf4 block (QLoRA's and torchao's default)
NF4_SCALER_BLOCK = 256  # block scales per double-quantisation group (torchao's default)
NF4_MIN_SCALER_BLOCK = 8  # smaller groups (odd tiny layers) make the double quantisation degenerate
FP8_DIM_MULTIPLE = 16  # torch._scaled_mm needs both weight dims to be multiples of 16


class Unsupported(Exception):
    """A layer (or the whole model) cannot take the format here; str(err) says why, briefly."""


def apply_base_precision(
    denoiser: nn.Module,
    precision: str,
    device: torch.device,
    *,
    stay_on_cpu: Collection[nn.Module] = (),
    fp8_emulate: bool = False,
) -> list[str]:
    """Apply `precision` to the frozen `denoiser` in place and place it on `device`.

    Takes: the denoiser as loaded (in the compute dtype, frozen; on the CPU or on `device`;
    before the LoRA is added), the run's base_precision, the training device, the modules a
    block swap keeps in CPU RAM (they and their children stay on the CPU, quantised too), and
    `fp8_emulate` (test hook: convert to fp8 on a device without fp8 matmuls; there the layers
    run the same casts with the matmuls emulated in fp32 (training.speed.fp8.reference_scaled_mm);
    never set it for training).
    int8 / nf4 quantise the repeated blocks' linears; fp8 converts them to fp8 compute; any other
    precision only moves the model.
    Returns: the reasons a part could not be applied ("nf4: 3 of 31 block linears kept in bf16
    (...)", "fp8: needs ..."): those parts stay in the compute dtype; [] when all was applied.
    Never raises for a conversion problem (each is logged and returned).
    """
    reasons: list[str] = []
    with torch.no_grad():
        if precision in QUANTISED:
            reasons += _quantise_blocks(denoiser, precision, device, _module_ids(stay_on_cpu))
        elif precision == "fp8":
            reasons += _convert_fp8(denoiser, device, _module_ids(stay_on_cpu), emulate=fp8_emulate)
        place(denoiser, device, stay_on_cpu)  # after the swaps: the new layers are inside too
    for reason in reasons:
        log.warning("base precision: %s", reason)
    return reasons


def base_weight_bytes(module: nn.Module) -> int:
    """Bytes held by the frozen weights of `module` (parameters that do not require grad, LoRA
    parameters left out), a quantised tensor counted as stored (its inner tensors)."""
    return sum(
        _stored_bytes(p)
        for name, p in module.named_parameters()
        if not p.requires_grad and ".lora_" not in f".{name}"
    )


def block_linears(denoiser: nn.Module) -> list[tuple[str, nn.Linear]]:
    """(qualified name, layer) of the frozen nn.Linear layers inside the repeated blocks, in module
    order, not yet converted: the layers this module converts. Empty when the model declares no
    repeated blocks."""
    inside = _module_ids(repeated_blocks(denoiser))
    converted = {id(m) for _, m in iter_quantised(denoiser)}
    return [
        (name, mod)
        for name, mod in denoiser.named_modules()
        if isinstance(mod, nn.Linear)
        and id(mod) in inside
        and id(mod) not in converted
        and not mod.weight.requires_grad
    ]


def place(model: nn.Module, device: torch.device, stay_on_cpu: Collection[nn.Module] = ()) -> None:
    """Move `model` to `device` one module's own tensors at a time (never two copies of the whole
    model), except `stay_on_cpu` and their children, which go to (or stay on) the CPU.
    Quantised weights move as they are. Parameters already in place keep their identity."""
    keep_cpu = _module_ids(stay_on_cpu)
    cpu = torch.device("cpu")
    for module in model.modules():
        target = cpu if id(module) in keep_cpu else device
        for name, param in list(module.named_parameters(recurse=False)):
            if not _on(param, target):
                setattr(
                    module, name, nn.Parameter(param.detach().to(target), requires_grad=param.requires_grad)
                )
        for name, buf in list(module.named_buffers(recurse=False)):
            if buf is not None and not _on(buf, target):
                setattr(module, name, buf.to(target))


# -- int8 / nf4 -----------------------------------------------------------------------------------


class QuantisedLinear(nn.Linear):
    """An nn.Linear whose frozen weight is a torchao quantised tensor (Int8Tensor or NF4Tensor).
    forward: x [..., in] -> [..., out] in x's dtype; the weight is dequantised per call."""

    @classmethod
    def from_linear(cls, linear: nn.Linear, weight: torch.Tensor) -> QuantisedLinear:
        """A QuantisedLinear with `weight` (quantised, on the target device) and `linear`'s bias."""
        with torch.device("meta"):
            new = cls(linear.in_features, linear.out_features, bias=False)
        new.weight = nn.Parameter(weight, requires_grad=False)
        new.bias = linear.bias
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _DequantisedLinearFn.apply(x, self.weight, self.bias)


class _DequantisedLinearFn(torch.autograd.Function):
    """y = x @ dequant(W).T + b, saving only the quantised W (no input, no bf16 weight)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(weight)
        return F.linear(x, dequantise(weight, x.dtype), None if bias is None else bias.to(x.dtype))

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, None, torch.Tensor | None]:
        (weight,) = ctx.saved_tensors
        grad_x = (
            grad_out @ dequantise(weight, grad_out.dtype) if ctx.needs_input_grad[0] else None
        )  # [..., in]
        grad_b = grad_out.reshape(-1, grad_out.shape[-1]).sum(0) if ctx.needs_input_grad[2] else None  # [out]
        return grad_x, None, grad_b


def dequantise(weight: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The plain [out, in] tensor of a quantised weight (NF4Tensor or a torchao Int8Tensor)."""
    from torchao.quantization import NF4Tensor

    if isinstance(weight, NF4Tensor):
        return weight.get_original_weight().to(dtype)
    return weight.dequantize(dtype)


def quantise_weight(weight: torch.Tensor, precision: str) -> torch.Tensor:
    """`weight` [out, in] (on the device it should live on) quantised as `precision` ("int8" or
    "nf4"). Raises Unsupported when the shape cannot be stored in the format or the result is
    not finite."""
    from torchao.quantization import Int8Tensor, PerRow, to_nf4

    if precision == "int8":
        quantised = Int8Tensor.from_hp(weight, granularity=PerRow())
    else:
        quantised = to_nf4(weight.contiguous(), NF4_BLOCK, nf4_scaler_block(weight.numel()))
    if not bool(torch.isfinite(dequantise(quantised, torch.float32)).all()):
        raise Unsupported("not finite once quantised")
    return quantised


def nf4_scaler_block(numel: int) -> int:
    """The double-quantisation group of a `numel`-weight nf4 tensor: 256 block scales (torchao's
    default; every real base layer), else the largest power of two <= 256 dividing the block
    count. Raises Unsupported when numel is not a multiple of the 64-weight block or the group
    would be smaller than NF4_MIN_SCALER_BLOCK."""
    if numel % NF4_BLOCK:
        raise Unsupported(f"size not a multiple of the {NF4_BLOCK}-weight nf4 block")
    blocks = numel // NF4_BLOCK
    group = NF4_SCALER_BLOCK
    while blocks % group:
        group //= 2
    if group < NF4_MIN_SCALER_BLOCK:
        raise Unsupported(f"too few nf4 blocks to group their scales by {NF4_MIN_SCALER_BLOCK}")
    return group


def _quantise_blocks(
    denoiser: nn.Module, precision: str, device: torch.device, keep_cpu: set[int]
) -> list[str]:
    targets = block_linears(denoiser)
    if not targets:
        return [f"{precision}: {type(denoiser).__name__} declares no repeated blocks; nothing was quantised"]
    try:
        import torchao.quantization  # noqa: F401 (the engine; fails here, not per layer)
    except ImportError as err:
        return [f"{precision}: torchao is not usable ({err}); the base stays in bf16"]
    skipped: Counter[str] = Counter()
    for name, linear in targets:
        try:  # on the device even for the CPU-kept layers: torchao's nf4 is ~100x slower on a CPU
            weight = quantise_weight(linear.weight.detach().to(device), precision)
            if id(linear) in keep_cpu:
                weight = weight.to("cpu")
        except Unsupported as err:
            skipped[str(err)] += 1
            continue
        except (RuntimeError, ValueError, AssertionError, NotImplementedError, TypeError) as err:
            skipped[f"torchao: {type(err).__name__}: {_first_line(err)}"] += 1
            continue
        _replace(denoiser, name, QuantisedLinear.from_linear(linear, weight))
    return [_kept_reason(precision, skipped, len(targets))] if skipped else []


# -- fp8 ------------------------------------------------------------------------------------------


def fp8_linear(linear: nn.Linear) -> nn.Module:
    """`linear` (frozen) as an Fp8FrozenLinear (training/speed/fp8.py), quantised on the linear's
    device. Raises Unsupported when a weight dim is not a multiple of 16."""
    if linear.in_features % FP8_DIM_MULTIPLE or linear.out_features % FP8_DIM_MULTIPLE:
        raise Unsupported(f"dims not multiples of {FP8_DIM_MULTIPLE}")
    return Fp8FrozenLinear(linear)


def _convert_fp8(
    denoiser: nn.Module, device: torch.device, keep_cpu: set[int], *, emulate: bool
) -> list[str]:
    if not emulate and not fp8_capable(device):
        return [
            f"fp8: needs a CUDA GPU of compute capability >= 8.9 (this device: {device}); the base stays in bf16"
        ]
    targets = block_linears(denoiser)
    if not targets:
        return [f"fp8: {type(denoiser).__name__} declares no repeated blocks; nothing was converted"]
    try:
        _probe_fp8(device, targets[0][1].weight.dtype)
    except (RuntimeError, ValueError, TypeError, NotImplementedError) as err:
        return [
            f"fp8: the probe layer failed ({type(err).__name__}: {_first_line(err)}); the base stays in bf16"
        ]
    skipped: Counter[str] = Counter()
    for name, linear in targets:
        try:
            converted = fp8_linear(linear.to(device))  # quantised on the device, one layer at a time
        except Unsupported as err:
            skipped[str(err)] += 1
            continue
        _replace(denoiser, name, converted.to("cpu") if id(linear) in keep_cpu else converted)
    return [_kept_reason("fp8", skipped, len(targets))] if skipped else []


def _probe_fp8(device: torch.device, dtype: torch.dtype) -> None:
    """One 32x32 fp8 layer, forward + backward on `device`: raises what the kernels raise, or
    RuntimeError when the output or input gradient is not finite."""
    with torch.enable_grad():
        probe = nn.Linear(32, 32, bias=True, device=device, dtype=dtype).requires_grad_(False)
        layer = fp8_linear(probe)
        x = torch.randn(16, 32, device=device, dtype=dtype, requires_grad=True)  # [16, 32]
        y = layer(x)  # [16, 32]
        y.float().sum().backward()
        if x.grad is None or not bool(torch.isfinite(y).all() and torch.isfinite(x.grad).all()):
            raise RuntimeError("the probe's output or input gradient is not finite")


# -- helpers --------------------------------------------------------------------------------------


def _kept_reason(precision: str, skipped: Counter[str], total: int) -> str:
    why = ", ".join(f"{reason}: {n}" for reason, n in skipped.most_common())
    return f"{precision}: {sum(skipped.values())} of {total} block linears kept in bf16 ({why})"


def _replace(root: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    setattr(parent, child, new)


def _module_ids(modules: Collection[nn.Module]) -> set[int]:
    return {id(m) for top in modules for m in top.modules()}


def _on(t: torch.Tensor, device: torch.device) -> bool:
    return t.device.type == device.type and (device.index is None or t.device.index == device.index)


def _stored_bytes(t: torch.Tensor) -> int:
    flatten = getattr(type(t), "__tensor_flatten__", None)
    if flatten is None:
        return t.numel() * t.element_size()
    names, _ = t.__tensor_flatten__()
    return sum(_stored_bytes(getattr(t, n)) for n in names if getattr(t, n) is not None)


def _first_line(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return lines[0][:200] if lines else "(no message)"


def iter_quantised(model: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    """(name, module) of the layers this module converted (QuantisedLinear and fp8 linears)."""
    for name, mod in model.named_modules():
        if isinstance(mod, (QuantisedLinear, Fp8FrozenLinear)):
            yield name, mod
