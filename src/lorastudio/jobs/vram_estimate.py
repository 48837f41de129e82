"""The rough peak accelerator memory of a run, per phase, from the safetensors headers of a local
pipeline (no model is loaded): `estimate_memory_gb`, shown by the preflight report
(jobs/preflight.py, which re-exports it) and used by the host RAM forecast (jobs/host_memory.py).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lorastudio import families
from lorastudio.config_datasets import top_resolution
from lorastudio.jobs.safetensors_headers import header_tensors

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.jobs.preflight import PlanValues

# Bytes per frozen base weight. fp8 keeps bf16 weights (fp8 is the matmul, not the storage);
# int8 stores one byte per weight plus per-row scales; nf4 half a byte plus block scales (~0.56).
WEIGHT_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 2.0, "int8": 1.0, "nf4": 0.56}
# The dtype of everything a quantised / fp8 plan does not quantise (encoders, VAE, embedders).
_COMPUTE_DTYPE = {"fp8": "bf16", "int8": "bf16", "nf4": "bf16"}
# Quantisation applies to the linears of the repeated blocks only (quant engineer's contract).
_QUANTISED = frozenset({"int8", "nf4"})
# Activation memory kept for the backward, relative to no checkpointing (the host RAM forecast's,
# jobs/host_memory.py, fitted on CPU runs).
ACTIVATION_FACTOR: dict[str, float] = {"off": 1.0, "selective": 0.5, "full": 0.1}
# The same on the accelerator. "full": the low-memory plans measured at real size (bench/RESULTS.md
# note 10: nf4 / int8 with full checkpointing, eager, batch 1, 1024 px) held 0.025-0.047 of the eager
# activations beside their weights, LoRA state and the 1 GB overhead (FLUX.1 0.047, Qwen-Image 0.025,
# Z-Image 0.040); 0.05 keeps every one of them an overestimate, by 1-19 % (0.1 gave 18-38 %: a 16 GB
# card's Qwen-Image plan, 13.2 GiB measured, was forecast at 15.8). "selective" is not measured.
DEVICE_ACTIVATION_FACTOR: dict[str, float] = {"off": 1.0, "selective": 0.5, "full": 0.05}
# Swapped blocks resident on the device at a time (the one computing + the one prefetched).
IN_FLIGHT_BLOCKS = 2
_DTYPE_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I8": 1, "U8": 1}
# Activation memory per billion denoiser parameters per sample at 1024 px, in GB, of a denoiser
# class not measured below (eager; the four measured families span 1.8-4.5).
_ACT_GB_PER_BPARAM = 2.5
# Measured on the H200 (bench/RESULTS.md, the table of run 2 and note 23; session 15 checks the
# estimate against them on header-only pipelines of the released configs): per denoiser class,
# GB of activations per billion parameters per sample at 1024 px, (regional compile, eager).
# Derived as (peak allocated - bf16 weights - LoRA state - _OVERHEAD_GB) / samples / billions:
# FLUX.1 compiled 25.5 GB at b1 (e2e run, default targets), eager 1.28x compiled (run 2 b1);
# Qwen-Image compiled 24.8 / 25.3 GB per sample (b1 / b2), eager 1.51x; Z-Image compiled 19 GB,
# eager 2.1x; SDXL compiled 6.1 GB per sample (b4), eager 1.28x.
_ACT_GB_PER_BPARAM_BY_CLASS: dict[str, tuple[float, float]] = {
    "FluxTransformer2DModel": (2.14, 2.74),
    "QwenImageTransformer2DModel": (1.22, 1.84),
    "ZImageTransformer2DModel": (3.1, 6.5),
    "UNet2DConditionModel": (2.37, 3.03),
}
# What regional compile saves of an unmeasured class's activations (the measured ones: 0.48-0.78).
_COMPILED_SHARE = 0.75
# Bytes per trainable LoRA parameter: fp32 weight, gradient and AdamW's two moments.
_LORA_STATE_BYTES = 16
_OVERHEAD_GB = 1.0
# A weight of a repeated block (diffusers' _repeated_blocks): the transformer blocks of FLUX.1,
# Qwen-Image and the U-Net's attentions, Z-Image's layers and refiners. The first match is the
# block itself (an SDXL key nests it inside down_blocks.N.attentions.M).
_BLOCK_KEY = re.compile(r"^(.*?(?:transformer_blocks|layers|refiner)\.\d+)\.")


def estimate_memory_gb(
    cfg: TrainConfig,
    model_dir: Path | None,
    plan: PlanValues,
    controls: float | None = None,
    *,
    compiled: bool = False,
) -> dict[str, Any]:
    """Rough peak accelerator memory of the run, per phase (the engine loads text encoders, VAE
    and denoiser one after another). Parameter counts come from the safetensors headers of the
    local pipeline; for a hub id nothing is known locally and the estimate is None.

    Takes the config (resolution, LoRA rank), the plan to size and the control images per sample
    in targets' pixels (controls of their own sizes: their pixels over the training side's
    square; None: the fewest the checkpoint's flavour takes, Family.source_control_images). Returns {"estimated_gb",
    "phases": {conditioning, latents, denoiser} in GB, "note"}.

    denoiser phase = base weights (WEIGHT_BYTES of the plan's precision for the repeated blocks'
    weights when quantised, the compute dtype for the rest; blocks swapped to CPU RAM do not
    count except IN_FLIGHT_BLOCKS of them) + LoRA (rank x (in + out) of every targeted linear in
    the headers) with fp32 weights, grads and AdamW state (16 B/param) + activations (GB per
    billion denoiser parameters per sample of the micro-batch at 1024 px: measured per denoiser
    class, compiled (`compiled`: regional compile on) or eager, _ACT_GB_PER_BPARAM_BY_CLASS; else
    2.5 eager, x _COMPILED_SHARE compiled; scaled by pixels (target + the edit
    sample's control images, whose tokens join the sequence), x DEVICE_ACTIVATION_FACTOR
    of the checkpointing mode) + 1 GB. Checked within 15 % (8 % measured) of the H200 peaks of
    FLUX.1, Qwen-Image, Z-Image and SDXL (bf16 and fp8, compiled and eager, b1-b8; tests/unit/jobs/
    test_real_size_forecasts.py); the low-memory plans (nf4 / int8, full checkpointing) are
    overestimated by 1-19 % (RESULTS note 10); block swap and selective checkpointing are not measured."""
    fam = families.get(cfg.family)
    measured = fam.spec.denoiser_class in _ACT_GB_PER_BPARAM_BY_CLASS
    note = (
        "formula: the headers' weights + LoRA/optimizer + activations measured for this model class on"
        " an H200 (within 15 % of the measured peaks of plans without checkpointing or block swap, 1-19 %"
        " over those of nf4 / int8 with full checkpointing; rough for block swap and selective checkpointing)"
        if measured
        else "rough formula (weights + LoRA/optimizer + activations scaled from H200 baselines), +-50%"
    )
    if model_dir is None:
        return {
            "estimated_gb": None,
            "phases": None,
            "note": "base model is not a local pipeline folder (a hub id or a single file): no local weights to size",
        }
    compute = _COMPUTE_DTYPE.get(plan.base_precision, plan.base_precision)
    per = WEIGHT_BYTES[compute] / 1e9
    encoders = sum(
        param_count(model_dir / sub) for sub in ("text_encoder", "text_encoder_2", "text_encoder_3")
    )
    vae = param_count(model_dir / "vae")
    other, blocks = denoiser_param_split(model_dir / fam.spec.denoiser)
    denoiser = other + sum(blocks)
    block_bytes = WEIGHT_BYTES[plan.base_precision if plan.base_precision in _QUANTISED else compute]
    resident = _resident_block_params(blocks, plan.offload_blocks)
    weights_gb = (other * per) + resident * block_bytes / 1e9
    targets = tuple(cfg.lora_targets or fam.spec.lora_targets)
    lora = lora_param_count(model_dir / fam.spec.denoiser, targets, cfg.lora_rank or 16, *adapter_shape(cfg))
    pixels = ((top_resolution(cfg.resolution) or 1024) / 1024) ** 2  # the largest of several
    if controls is None:  # unknown dataset: the fewest the checkpoint's flavour takes
        controls = fam.source_control_images(model_dir)[0]
    pixels *= 1 + controls  # an edit sample's control tokens join the sequence
    compiled_rate, eager_rate = _ACT_GB_PER_BPARAM_BY_CLASS.get(
        fam.spec.denoiser_class, (_ACT_GB_PER_BPARAM * _COMPILED_SHARE, _ACT_GB_PER_BPARAM)
    )
    act = (compiled_rate if compiled else eager_rate) * denoiser / 1e9 * plan.micro_batch_size * pixels
    act *= DEVICE_ACTIVATION_FACTOR[plan.gradient_checkpointing]
    phases = {
        "conditioning": round(encoders * per + _OVERHEAD_GB, 2),
        "latents": round(vae * per * 3 + _OVERHEAD_GB, 2),
        "denoiser": round(weights_gb + lora * _LORA_STATE_BYTES / 1e9 + act + _OVERHEAD_GB, 2),
    }
    return {"estimated_gb": max(phases.values()), "phases": phases, "note": note}


def _resident_block_params(blocks: list[int], offload: int) -> float:
    """Parameters of the repeated blocks on the device: all but the `offload` swapped ones, plus
    IN_FLIGHT_BLOCKS of those (their average size: which blocks swap is the engine's choice)."""
    if not blocks:
        return 0.0
    swapped = min(max(offload, 0), len(blocks))
    average = sum(blocks) / len(blocks)
    return average * (len(blocks) - swapped + min(IN_FLIGHT_BLOCKS, swapped))


def denoiser_param_split(folder: Path) -> tuple[int, list[int]]:
    """(parameters outside the repeated blocks, parameters of each repeated block) of the
    denoiser's *.safetensors files in `folder` (0 and [] when there are none)."""
    other = 0
    blocks: dict[str, int] = {}
    for file in sorted(folder.glob("*.safetensors")) if folder.is_dir() else []:
        for name, count in _safetensors_tensors(file):
            match = _BLOCK_KEY.match(name)
            if match:
                blocks[match.group(1)] = blocks.get(match.group(1), 0) + count
            else:
                other += count
    return other, list(blocks.values())


def lora_param_count(
    folder: Path,
    targets: tuple[str, ...],
    rank: int,
    adapter: str = "lora",
    factor: int | None = None,
    decompose_both: bool = False,
) -> int:
    """Trainable parameters of a rank-`rank` adapter (`adapter`: lora, dora, loha or lokr, with
    LoKr's `factor` and `decompose_both`; jobs/adapter_params.py) on the linears of the denoiser
    in `folder` whose module name is a target or ends with "." + a target (peft's suffix match),
    from the 2-D (linear) and 3-D / 4-D (convolution) `.weight` shapes in the safetensors headers
    (0 when there are none)."""
    from lorastudio.jobs.adapter_params import layer_params

    total = 0
    for file in sorted(folder.glob("*.safetensors")) if folder.is_dir() else []:
        for name, shape in _safetensors_shapes(file):
            module, _, leaf = name.rpartition(".")
            if (
                leaf == "weight"
                and len(shape) in (2, 3, 4)  # a linear layer, a 1-D / 2-D convolution (peft adapts each)
                and any(module == t or module.endswith("." + t) for t in targets)
            ):
                kernel = math.prod(shape[2:])
                total += layer_params(adapter, rank, shape[0], shape[1], factor, decompose_both, kernel)
    return total


def adapter_shape(cfg: Any) -> tuple[str, int | None, bool]:
    """(adapter, lokr_factor, lokr_decompose_both) of a run config, for `lora_param_count`."""
    return (
        str(getattr(cfg, "adapter", "lora")),
        getattr(cfg, "lokr_factor", None),
        bool(getattr(cfg, "lokr_decompose_both", False)),
    )


def param_count(folder: Path) -> int:
    """Parameters stored in the *.safetensors files of `folder` (0 when there are none)."""
    total = 0
    for file in sorted(folder.glob("*.safetensors")) if folder.is_dir() else []:
        total += sum(count for _, count in _safetensors_tensors(file))
    return total


def converted_bytes(folder: Path, load_dtype: str) -> int:
    """Bytes of the tensors in the *.safetensors files of `folder` whose stored dtype is not
    `load_dtype` (a safetensors name: "BF16", "F16", "F32"), counted in `load_dtype`: what a
    from_pretrained(dtype=...) to the CPU converts into memory of its own (held until the
    component moves to the GPU). Tensors stored in `load_dtype` are not counted: they stay views
    of the file's pages, read and released one by one as the component moves (0 when there are
    no files)."""
    size = _DTYPE_BYTES.get(load_dtype, 4)
    total = 0
    for file in sorted(folder.glob("*.safetensors")) if folder.is_dir() else []:
        for t in header_tensors(file):
            if t.dtype is None or t.dtype == load_dtype:
                continue
            total += t.nbytes // _DTYPE_BYTES.get(t.dtype, 4) * size
    return total


def _safetensors_shapes(file: Path) -> list[tuple[str, tuple[int, ...]]]:
    """(tensor name, shape) of every tensor in a safetensors header; [] when any tensor's shape is
    not a list of at most 8 whole numbers >= 0 (what safetensors writes): a damaged or hostile
    header (a string, null or nested list, a negative or fractional size) reads as no header,
    never as a crash of the estimate or the forecast (jobs/time_work.py). The header is parsed
    once per file version (jobs/safetensors_headers.py)."""
    out = []
    for t in header_tensors(file):
        if t.shape is None:
            return []
        out.append((t.name, t.shape))
    return out


def _safetensors_tensors(file: Path) -> list[tuple[str, int]]:
    """(tensor name, element count) of every tensor in a safetensors header (reads only the
    header, once per file version; [] when it cannot be read)."""
    return [(t.name, t.nbytes // _DTYPE_BYTES.get(t.dtype or "F32", 4)) for t in header_tensors(file)]
