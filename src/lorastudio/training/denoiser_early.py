"""The denoiser's load beside phases 1-2 (issue 31: the time to the first step against the
weights' load; bench/RESULTS note 43: the denoiser's pageable host-to-device copy, ~3.5-4 s of
FLUX.1's 23.8 GB of bf16, ran after the text encoders and the VAE, on the critical path).

Where the plan is known before phases 1-2 and the denoiser goes to the device whole (no
quantised base, no block swap: plan_build's `stage_on_cpu` false), `start_denoiser` at the start
of phase 1
- builds the denoiser on the CPU on the main thread (Family.load_denoiser to "cpu":
  from_pretrained, the dtype cast, adapt_denoiser). Not in a thread: diffusers' from_pretrained
  changes process-wide state while it builds a model (`torch.set_default_dtype` of the load's
  dtype, which a tensor made meanwhile by the main thread's encoders would take; `torch.nn.init`'s
  functions and accelerate's `nn.Module.register_parameter`, patched and restored by whichever
  thread leaves last), so no other load or computation may run beside it;
- then copies its weights, in a background thread, into one host buffer (page-locked on CUDA:
  cudaHostRegister), while the text encoders and the VAE load and encode. The copy is torch's
  (the GIL released); it reads the weights' file pages that jobs/prefetch.py brought in;
`EarlyDenoiser.finish` (where the old path loaded, after phase 2 freed its models) joins the
thread and copies the buffer to the device, non-blocking from page-locked memory (the old path
copied pageable memory, one tensor at a time). The run waits only for what is left of the
thread's copy and for the device copy. The LoRA (and its `torch.manual_seed(cfg.seed)`) is
added after `finish`, on the main thread, by plan_build as before: the run is bit-identical.

Refused (the old sequential path, the reason logged) where the plan is measured under a memory
budget, where the base is quantised or blocks swap, on a device that is not CUDA, in a
data-parallel run (its ranks share the host's RAM), for a base that is not a local folder (its
size unknown), and where the host's available RAM (jobs/host_memory.available_host_bytes) does not
hold the buffer, the CPU-built denoiser's converted tensors and the text encoders' beside each
other with HOST_MARGIN to spare: jobs/host_memory's forecast counts the phases one after another,
so a host it forecasts for the sequential path never runs the overlap short.

A stop or an error in phases 1-2 `close`s it: the thread stops at its next tensor and is
joined, the buffer freed. An error in the thread is raised by `finish` (the same exception).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lorastudio.families.single_file import model_source
from lorastudio.training.events import Emit, ModelLoadStarted
from lorastudio.training.plan import Plan
from lorastudio.training.precision import is_quantised, pick_dtype
from lorastudio.training.preflight import PreparedRun

log = logging.getLogger(__name__)

HOST_MARGIN = 4 * 10**9  # bytes kept free beyond the overlap's own (the process, the caption embeddings)
_ALIGN = 64  # each tensor's offset in the host buffer: any dtype's alignment
_ON_CPU = False  # a test seam: overlap on a CPU device too (an unpinned buffer), to test the path


class _Stopped(Exception):
    """The thread saw `close`: it ends without a buffer."""


@dataclass
class LoadReport:
    """The denoiser's load: `seconds` its own work (the CPU build, the thread's copy, the device
    copy), `waited` the part the run waited for (the CPU build, what was left of the thread's copy
    at the join, the device copy): ModelLoadCompleted's seconds and waited_s."""

    seconds: float
    waited: float


def overlap_refusal(run: PreparedRun, plan: Plan | None) -> str | None:
    """Why the denoiser's load may not run beside phases 1-2 of `run` under `plan` (module
    docstring), or None when it may."""
    cfg, device = run.cfg, run.device
    if plan is None:
        return "a memory budget measures the plan after phases 1-2"
    if is_quantised(plan.base_precision) or plan.offload_blocks > 0:
        return "the denoiser is staged on the CPU (a quantised base or block swap)"
    if device.type != "cuda" and not _ON_CPU:
        return f"the device is {device.type}, not CUDA"
    if cfg.num_gpus > 1:
        return "a data-parallel run's ranks share the host's RAM"
    source = model_source(cfg)
    if not isinstance(source, str) or not Path(source).is_dir():
        return "the base is not a local folder (its size is unknown before it loads)"
    need = host_bytes_needed(run, plan, Path(source))
    from lorastudio.jobs.host_memory import available_host_bytes

    available = available_host_bytes()
    if available is None:
        return "the host's available RAM is unknown"
    if need + HOST_MARGIN > available:
        return (
            f"the host has {available / 1e9:.1f} GB available, the overlap needs {need / 1e9:.1f} GB"
            f" + {HOST_MARGIN / 1e9:.0f} GB to spare"
        )
    return None


def host_bytes_needed(run: PreparedRun, plan: Plan, folder: Path) -> int:
    """Host RAM the overlap holds at its peak in phase 1: the buffer (every denoiser parameter
    in the plan's dtype), the CPU-built denoiser's converted tensors (those stored in another
    dtype: jobs/vram_estimate.converted_bytes) and the text encoders' converted tensors."""
    from lorastudio.jobs.host_memory import _SAFETENSORS_DTYPE
    from lorastudio.jobs.vram_estimate import converted_bytes, param_count

    dtype = pick_dtype(plan.base_precision, run.device)
    name = _SAFETENSORS_DTYPE.get(plan.base_precision, "F32")
    denoiser = folder / run.family.spec.denoiser
    encoders = sum(
        converted_bytes(folder / s, name) for s in ("text_encoder", "text_encoder_2", "text_encoder_3")
    )
    return param_count(denoiser) * dtype.itemsize + converted_bytes(denoiser, name) + encoders


class EarlyDenoiser:
    """A denoiser built on the CPU whose weights a thread copies into one host buffer (module
    docstring). `finish(device)` returns it on the device; `close()` ends the thread and frees
    the buffer (idempotent; `finish` calls it)."""

    def __init__(self, denoiser: Any, build_s: float, pin: bool):
        self.denoiser: Any = denoiser
        self._build_s = build_s
        self._pin = pin
        self._stop = threading.Event()
        self._error: Exception | None = None
        self._buffer: torch.Tensor | None = None  # [bytes] uint8
        self._views: dict[int, torch.Tensor] = {}  # id(param or buffer) -> its bytes in the buffer
        self._pinned = False
        self._copy_s = 0.0
        self._thread = threading.Thread(target=self._fill, name="denoiser-early", daemon=True)
        self._thread.start()

    def _tensors(self) -> list[torch.Tensor]:
        seen: dict[int, torch.Tensor] = {}
        for t in [*self.denoiser.parameters(), *self.denoiser.buffers()]:
            seen.setdefault(id(t), t)
        return list(seen.values())

    def _fill(self) -> None:
        t0 = time.perf_counter()
        try:
            tensors = [t for t in self._tensors() if t.is_contiguous() and t.device.type == "cpu"]
            offsets, total = [], 0
            for t in tensors:
                offsets.append(total)
                total += -(-t.numel() * t.element_size() // _ALIGN) * _ALIGN
            self._buffer = buffer = torch.empty(total, dtype=torch.uint8)  # [bytes]
            views = {}
            for t, offset in zip(tensors, offsets, strict=True):
                if self._stop.is_set():
                    raise _Stopped
                n = t.numel() * t.element_size()
                view = buffer[offset : offset + n].view(t.dtype).view(t.shape)
                view.copy_(t)
                views[id(t)] = view
            if self._pin and total and not self._stop.is_set():
                self._pinned = _page_lock(buffer)  # after the copy: its pages are there to lock
            self._views = views
        except _Stopped:
            pass
        except Exception as err:  # noqa: BLE001 - any error: raised again on the main thread by finish()
            self._error = err
        self._copy_s = time.perf_counter() - t0

    def finish(self, device: torch.device) -> tuple[Any, LoadReport]:
        """Join the thread (raising its error, if any), move the denoiser to `device` from the
        buffer (a tensor the buffer lacks: the ordinary copy) and free the buffer. Returns the
        denoiser on `device` and its LoadReport."""
        t0 = time.perf_counter()
        self._thread.join()
        joined = time.perf_counter()
        try:
            if self._error is not None:
                raise self._error
            views, non_blocking = self._views, self._pinned

            def place(t: torch.Tensor) -> torch.Tensor:
                view = views.get(id(t))
                if view is None or t.device.type != "cpu":  # a tied tensor moves once
                    return t.to(device)
                return view.to(device, non_blocking=non_blocking)

            denoiser = self.denoiser._apply(place)  # parameters and buffers, as Module.to does
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # the buffer is freed next
        finally:
            self.close()
        self.denoiser = None
        end = time.perf_counter()
        report = LoadReport(
            seconds=self._build_s + self._copy_s + (end - joined), waited=self._build_s + (end - t0)
        )
        log.info(
            "denoiser load beside phases 1-2: build %.2f s, host copy %.2f s (%.2f s waited), device copy %.2f s",
            self._build_s, self._copy_s, joined - t0, end - joined,
        )  # fmt: skip
        return denoiser, report

    def close(self) -> None:
        """End the thread (it stops at its next tensor) and free the buffer."""
        self._stop.set()
        self._thread.join()
        self._views = {}
        if self._pinned and self._buffer is not None:
            from torch.cuda._pin_memory_utils import unpin_memory

            unpin_memory(self._buffer.data_ptr())
            self._pinned = False
        self._buffer = None


def _page_lock(buffer: torch.Tensor) -> bool:
    """Page-lock `buffer` (cudaHostRegister) so that its device copy is a DMA; False (logged)
    where the host refuses (a locked-memory limit): the copy is then pageable, as before."""
    from torch.cuda._pin_memory_utils import pin_memory

    try:
        pin_memory(buffer.data_ptr(), buffer.numel())
    except RuntimeError as err:
        log.warning("denoiser load: its host buffer could not be page-locked (%s); copying it pageable", err)
        return False
    return True


def start_denoiser(run: PreparedRun, plan: Plan | None, emit: Emit) -> EarlyDenoiser | None:
    """The denoiser built on the CPU and its copy started beside phases 1-2 (module docstring),
    ModelLoadStarted("denoiser") emitted first; None where the overlap is refused (the reason
    logged). Raises ModelSourceError (the load), as build_denoiser would."""
    reason = overlap_refusal(run, plan)
    if reason is not None or plan is None:
        log.info("denoiser load after phases 1-2: %s", reason)
        return None
    emit(ModelLoadStarted(component="denoiser"))
    cfg = run.cfg
    t0 = time.perf_counter()
    dtype = pick_dtype(plan.base_precision, run.device)
    denoiser = run.family.load_denoiser(model_source(cfg), cfg.revision, dtype, torch.device("cpu"))
    return EarlyDenoiser(denoiser, time.perf_counter() - t0, pin=run.device.type == "cuda")
