"""Start CUDA's context and libraries on a side thread while a run's preflight works.

Why it exists (issue 31 item 1): a training process creates the CUDA primary context, and loads
cuBLAS, at its first CUDA call: run_phases' reset of the peak-memory counters,
after the preflight (settings, dataset scan, the base's identity) has run on the main thread. The
job service's standby worker holds no context while it waits (jobs/standby.py: the GPU stays free
for others), so every server run paid that start in series before its first model load. Started
here beside the preflight, the driver's work overlaps it; the main thread's first CUDA call waits
on torch's own initialisation lock for whatever is left. Measured on an H100 (RESULTS note 40): ready
in 0.24 s beside the preflight; FLUX.1's text encoders' load 2.2 -> 2.0 s and its first caption
batch 0.75 -> 0.51 s through the API.

Contract: `warm_device(device)` returns at once. For a CUDA device it starts one daemon thread
that makes the device's primary context (a one-element allocation, through the caching allocator)
and loads cuBLAS and cuDNN (a handle and one small convolution: the libraries are process-wide,
the handles this thread's own; a real run's first text-encoder matmul and first VAE convolution
otherwise load them); any RuntimeError there (torch's AcceleratorError included) is logged at debug level and left for the
run's own first CUDA call to raise where it belongs. For any other device it does nothing and
returns None. Nothing else in the run depends on the thread: it is never joined.
"""

from __future__ import annotations

import logging
import threading
import time

import torch

log = logging.getLogger("lorastudio.training.speed.device_warmup")


def warm_device(device: torch.device) -> threading.Thread | None:
    """Start making `device`'s CUDA context in the background (see the module docstring);
    None (nothing started) for a device that is not CUDA."""
    if device.type != "cuda":
        return None
    thread = threading.Thread(target=_warm, args=(device,), name="lorastudio-cuda-warmup", daemon=True)
    thread.start()
    return thread


def _warm(device: torch.device) -> None:
    started = time.perf_counter()
    try:
        with torch.cuda.device(device):
            torch.zeros(1, device=device)  # the primary context, the caching allocator's first segment
            torch.cuda.current_blas_handle()  # cuBLAS (and cuBLASLt) loaded for the whole process
            pixels = torch.zeros(1, 3, 8, 8, device=device, dtype=torch.bfloat16)  # [B, C, H, W]
            torch.nn.functional.conv2d(pixels, torch.zeros(4, 3, 3, 3, device=device, dtype=torch.bfloat16))
            torch.cuda.synchronize(device)
    except RuntimeError as err:
        log.debug("CUDA warm-up of %s failed (the run's first CUDA call reports it): %s", device, err)
        return
    log.info(
        "CUDA context, cuBLAS and cuDNN ready in %.2f s (beside the preflight)", time.perf_counter() - started
    )
