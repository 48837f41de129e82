"""The host RAM forecast on a GPU host (jobs/host_memory.py, RELIABILITY 303): a component's
weights stored in the dtype they load in do not pass through host RAM (measured: FLUX.1's 23.8
GB denoiser and 9.5 GB T5 from bf16 files peaked at 3.77 GB of RSS, the old forecast said 25.8
GB); what a load converts to another dtype on the CPU does."""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from lorastudio.jobs import host_memory
from lorastudio.jobs.hardware import HostInfo, precisions_for
from lorastudio.jobs.preflight import plan_for_estimate
from lorastudio.jobs.validation import validate_run
from lorastudio.jobs.vram_estimate import converted_bytes, param_count
from lorastudio.settings import Settings

GPU = HostInfo("cuda", "H100", 79.2, precisions_for("cuda", (9, 0)), gpu_count=1)


def _as_dtype(folder: Path, dtype: torch.dtype) -> None:
    """Rewrite every floating tensor of the folder's safetensors files in `dtype` (metadata kept)."""
    for file in folder.rglob("*.safetensors"):
        with safe_open(str(file), "pt") as fh:
            metadata = fh.metadata()
        tensors = {k: v.to(dtype) if v.is_floating_point() else v for k, v in load_file(file).items()}
        save_file(tensors, str(file), metadata=metadata)


def _add_sparse_tensor(folder: Path, dtype: str, elements: int) -> None:
    """A safetensors file in `folder` holding one 2-D tensor of `elements` in `dtype`, written
    sparse (header and size only): the forecast reads headers, never the data."""
    size = elements * {"BF16": 2, "F32": 4}[dtype]
    header = json.dumps(
        {
            "transformer_blocks.0.extra.weight": {
                "dtype": dtype,
                "shape": [elements // 1000, 1000],
                "data_offsets": [0, size],
            }
        }
    ).encode()
    with (folder / "zz-extra.safetensors").open("wb") as fh:
        fh.write(struct.pack("<Q", len(header)) + header)
        fh.truncate(8 + len(header) + size)


def _forecast(settings: Settings, model: Path) -> dict:
    raw = {"family": "flux", "base_model": str(model), "data_dir": "shapes", "resolution": 256, "steps": 2}
    run = validate_run(raw, settings, live_output_names=set())
    cfg = run.config
    plan = plan_for_estimate(cfg, GPU)
    assert plan.base_precision == "bf16" and plan.offload_blocks == 0
    return host_memory.host_memory_forecast(cfg, run.model_dir, plan, GPU, run.scan.bucket_histogram())


def test_weights_stored_in_their_load_dtype_are_not_counted_on_cuda(
    settings: Settings, tiny_model: Callable[[str], Path], shapes: Path, tmp_path: Path
) -> None:
    model = tmp_path / "flux-bf16"
    shutil.copytree(tiny_model("flux"), model)
    _as_dtype(model, torch.bfloat16)
    _add_sparse_tensor(model / "transformer", "BF16", 1_000_000_000)  # a 2 GB bf16 denoiser
    forecast = _forecast(settings, model)
    cache = forecast["phases"]["denoiser"]  # nothing converted, no swapped blocks: the cache alone
    assert cache < 0.01 and forecast["phases"]["latents"] == pytest.approx(cache, abs=1e-3)
    assert forecast["phases"]["conditioning"] == 0.0
    assert forecast["host_gb"] == pytest.approx(host_memory.CUDA_PROCESS_GB + cache, abs=0.01)
    assert forecast["certain"] is False  # a warning on CUDA, never a refusal


def test_weights_converted_on_the_cpu_are_counted_on_cuda(
    settings: Settings, tiny_model: Callable[[str], Path], shapes: Path, tmp_path: Path
) -> None:
    model = tmp_path / "flux-fp32"
    shutil.copytree(tiny_model("flux"), model)
    _as_dtype(model, torch.float32)  # loaded in bf16: every tensor converted, held until the move
    _add_sparse_tensor(model / "transformer", "F32", 1_000_000_000)  # 4 GB stored, 2 GB converted
    forecast = _forecast(settings, model)
    transformer = param_count(model / "transformer") * 2
    assert transformer > 2e9
    assert converted_bytes(model / "transformer", "BF16") == transformer
    assert converted_bytes(model / "transformer", "F32") == 0
    cache = forecast["phases"]["denoiser"] - transformer / 1e9
    assert cache >= 0 and forecast["phases"]["latents"] == pytest.approx(
        cache + param_count(model / "vae") * 2 / 1e9, abs=2e-3
    )  # phases are rounded to the MB
    encoders = sum(param_count(model / s) for s in ("text_encoder", "text_encoder_2")) * 2 / 1e9
    assert forecast["phases"]["conditioning"] == pytest.approx(encoders, abs=1e-3)
