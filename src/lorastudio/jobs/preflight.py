"""The preflight report: what a validated run would do, computed without loading any model.

The VRAM estimate is a rough formula (see `estimate_memory_gb`), not a measurement.
"""

from __future__ import annotations

import json
import math
import struct
from collections import Counter
from pathlib import Path
from typing import Any

from lorastudio import families
from lorastudio.config import TrainConfig
from lorastudio.data import is_image_name
from lorastudio.jobs.hardware import host_info, resolved_dtype
from lorastudio.jobs.validation import ValidatedRun

_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
_DTYPE_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I8": 1, "U8": 1}
# Activation memory per billion denoiser parameters per sample at 1024 px, in GB, fitted on the
# H200 baselines of the four families (batch 1: 1.6-5.9, typical ~2.5; grad checkpointing: ~0.1x).
_ACT_GB_PER_BPARAM = 2.5
_CKPT_FACTOR = 0.1
_OVERHEAD_GB = 1.0


def preflight_report(run: ValidatedRun) -> dict[str, Any]:
    """A JSON-able report: dataset (images found/used/dropped with reasons, captions, buckets),
    schedule (steps, epochs), precision plan and a rough memory estimate."""
    cfg = run.config
    scan = run.scan
    sources = Counter(item.caption_source for item in scan.items)
    batches = sum(math.ceil(n / cfg.batch_size) for n in scan.bucket_histogram().values())
    steps_per_epoch = max(1, math.ceil(batches / cfg.grad_accum))
    steps = cfg.num_epochs * steps_per_epoch if cfg.num_epochs > 0 else cfg.steps
    host = host_info()
    dtype = resolved_dtype(cfg.base_precision, host)
    return {
        "config": cfg.model_dump(mode="json"),
        "dataset": {
            "path": str(scan.root),
            "images_found": len(scan.items) + sum(1 for name, _ in scan.dropped if is_image_name(name)),
            "images_used": len(scan.items),
            "dropped": [{"file": name, "reason": why} for name, why in scan.dropped],
            "missing_captions": sorted(
                i.path.name for i in scan.items if i.caption_source in ("default", "trigger")
            ),
            "caption_sources": dict(sorted(sources.items())),
            "unique_captions": len(scan.captions()),
            "buckets": scan.bucket_histogram(),
            "fingerprint": scan.fingerprint,
        },
        "schedule": {
            "steps": steps,
            "epochs": round(steps / steps_per_epoch, 2),
            "steps_per_epoch": steps_per_epoch,
            "batch_size": cfg.batch_size,
            "grad_accum": cfg.grad_accum,
        },
        "precision": {
            "requested": cfg.base_precision,
            "base_dtype": dtype,
            "lora_dtype": "fp32",
            "device": host.device,
            "tf32": cfg.enable_tf32 and host.device == "cuda",
            "gradient_checkpointing": cfg.gradient_checkpointing,
        },
        "memory": estimate_memory_gb(cfg, run.model_dir, dtype),
        "host": host.public(),
    }


def estimate_memory_gb(cfg: TrainConfig, model_dir: Path | None, dtype: str) -> dict[str, Any]:
    """Rough peak accelerator memory of the run, per phase (the engine loads text encoders, VAE
    and denoiser one after another). Parameter counts come from the safetensors headers of the
    local pipeline; for a hub id nothing is known locally and the estimate is None.

    denoiser phase = weights at the base dtype + LoRA (rank/16 x 1% of the denoiser) with fp32
    weights, grads and AdamW state (16 B/param) + activations (2.5 GB per billion denoiser
    parameters per sample at 1024 px, scaled by pixels; x0.1 with gradient checkpointing) + 1 GB.
    Calibrated on four H200 measurements; expect it to be off by up to ~50%."""
    note = "rough formula (weights + LoRA/optimizer + activations scaled from H200 baselines), +-50%"
    if model_dir is None:
        return {
            "estimated_gb": None,
            "phases": None,
            "note": "base model is a hub id: no local weights to size",
        }
    fam = families.get(cfg.family)
    per = _BYTES[dtype] / 1e9
    encoders = sum(
        _param_count(model_dir / sub) for sub in ("text_encoder", "text_encoder_2", "text_encoder_3")
    )
    vae = _param_count(model_dir / "vae")
    denoiser = _param_count(model_dir / fam.spec.denoiser)
    lora = denoiser * 0.01 * (cfg.lora_rank or 16) / 16
    pixels = ((cfg.resolution or 1024) / 1024) ** 2
    act = _ACT_GB_PER_BPARAM * denoiser / 1e9 * cfg.batch_size * pixels
    if cfg.gradient_checkpointing in ("selective", "full"):
        act *= _CKPT_FACTOR
    phases = {
        "conditioning": round(encoders * per + _OVERHEAD_GB, 2),
        "latents": round(vae * per * 3 + _OVERHEAD_GB, 2),
        "denoiser": round(denoiser * per + lora * 16 / 1e9 + act + _OVERHEAD_GB, 2),
    }
    return {"estimated_gb": max(phases.values()), "phases": phases, "note": note}


def _param_count(folder: Path) -> int:
    """Parameters stored in the *.safetensors files of `folder` (0 when there are none)."""
    total = 0
    for file in sorted(folder.glob("*.safetensors")) if folder.is_dir() else []:
        total += _safetensors_params(file)
    return total


def _safetensors_params(file: Path) -> int:
    """Parameter count from a safetensors header (reads only the header)."""
    try:
        with file.open("rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(min(size, 100_000_000)))
    except (OSError, ValueError, struct.error):
        return 0
    total = 0
    for name, meta in header.items():
        if name == "__metadata__" or not isinstance(meta, dict):
            continue
        begin, end = meta.get("data_offsets", (0, 0))
        total += (end - begin) // _DTYPE_BYTES.get(meta.get("dtype", "F32"), 4)
    return total
