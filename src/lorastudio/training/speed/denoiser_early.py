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
- then copies its weights in a background thread (training/speed/weight_copy.py; torch's copies, the
  GIL released) while the text encoders and the VAE load and encode: straight to the device
  through a ring of two page-locked chunks on a stream of its own where the device has room for
  the denoiser beside the text encoders and the VAE (`device_room`: their parameters +
  DEVICE_MARGIN against the free memory; the run's denoiser phase holds more than that beside its
  weights), else into one host buffer, page-locked once full. It reads the weights' file pages
  that jobs/prefetch.py brings in (which an early denoiser start does not cut short).
`EarlyDenoiser.finish` (where the old path loaded, after phase 2 freed its models) joins the
thread and puts the copies in the denoiser's place (from a host buffer: a non-blocking copy from
page-locked memory; the old path copied pageable memory, one tensor at a time). The run waits
only for what is left of the thread's copy (and a host buffer's device copy). The LoRA (and its
`torch.manual_seed(cfg.seed)`) is added after `finish`, on the main thread, by plan_build as
before: the run is bit-identical.

Refused (the old sequential path, the reason logged) where Settings.early_denoiser is off
(LORASTUDIO_EARLY_DENOISER=0; on by default since its GPU measure, bench/RESULTS note 44: FLUX.1
on an H100, the run waited 0.5-0.6 s of a 7.4-7.6 s copy, the step's peak VRAM unchanged), where the plan is measured under a memory
budget, where the base is quantised or blocks swap, on a device that is not CUDA, in a
data-parallel run (its ranks share the host's RAM), for a base that is not a local folder (its
size unknown), and where the host's available RAM (jobs/host_memory.available_host_bytes) does not
hold the CPU-built denoiser's converted tensors, the text encoders' and a host buffer beside each
other with HOST_MARGIN to spare: jobs/host_memory's forecast counts the phases one after another,
so a host it forecasts for the sequential path never runs the overlap short.

A stop or an error in phases 1-2 `close`s it: the thread stops at its next tensor and is
joined, its copies and buffer freed. An error in the thread is raised by `finish` (the same
exception object) where the sequential path would have raised its load's error.
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
from lorastudio.training.planning.plan import Plan
from lorastudio.training.precision import is_quantised, pick_dtype
from lorastudio.training.preflight import PreparedRun
from lorastudio.training.speed.weight_copy import HostBuffer, Stopped, ring_to_device

log = logging.getLogger(__name__)

HOST_MARGIN = 4 * 10**9  # bytes kept free beyond the overlap's own (the process, the caption embeddings)
DEVICE_MARGIN = 8 * 10**9  # bytes kept free beside the three components (the encoders' activations)
_ENCODERS = ("text_encoder", "text_encoder_2", "text_encoder_3")
_ON_CPU: str | None = None  # a test seam: overlap on a CPU device too, its copy "device" or "host"


@dataclass
class LoadReport:
    """The denoiser's load: `seconds` its own work (the CPU build, the thread's copy, the device
    copy), `waited` the part the run waited for (the CPU build, what was left of the thread's copy
    at the join, the device copy): ModelLoadCompleted's seconds and waited_s."""

    seconds: float
    waited: float


def overlap_refusal(run: PreparedRun, plan: Plan | None, enabled: bool = True) -> str | None:
    """Why the denoiser's load may not run beside phases 1-2 of `run` under `plan` (module
    docstring), or None when it may; `enabled`: Settings.early_denoiser."""
    cfg, device = run.cfg, run.device
    if not enabled:
        return "LORASTUDIO_EARLY_DENOISER=0 turns it off"
    if plan is None:
        return "a memory budget measures the plan after phases 1-2"
    if is_quantised(plan.base_precision) or plan.offload_blocks > 0:
        return "the denoiser is staged on the CPU (a quantised base or block swap)"
    if device.type != "cuda" and _ON_CPU is None:
        return f"the device is {device.type}, not CUDA"
    if cfg.num_gpus > 1:
        return "a data-parallel run's ranks share the host's RAM"
    source = model_source(cfg)
    if not isinstance(source, str) or not Path(source).is_dir():
        return "the base is not a local folder (its size is unknown before it loads)"
    from lorastudio.jobs.host_memory import available_host_bytes

    available = available_host_bytes()
    if available is None:
        return "the host's available RAM is unknown"
    need = host_bytes_needed(run, plan, Path(source), buffer=not device_room(run, plan, Path(source)))
    if need + HOST_MARGIN > available:
        return (
            f"the host has {available / 1e9:.1f} GB available, the overlap needs {need / 1e9:.1f} GB"
            f" + {HOST_MARGIN / 1e9:.0f} GB to spare"
        )
    return None


def _component_bytes(folder: Path, parts: tuple[str, ...], itemsize: int) -> int:
    from lorastudio.jobs.vram_estimate import param_count

    return sum(param_count(folder / part) for part in parts) * itemsize


def device_room(run: PreparedRun, plan: Plan, folder: Path) -> bool:
    """Whether the device has room for the denoiser beside the text encoders and the VAE with
    DEVICE_MARGIN to spare (their activations): free memory (torch.cuda.mem_get_info) against
    their parameters in the plan's dtype. Then the thread copies it to the device; else into a
    host buffer."""
    if run.device.type != "cuda":
        return _ON_CPU == "device"
    itemsize = pick_dtype(plan.base_precision, run.device).itemsize
    need = _component_bytes(folder, (run.family.spec.denoiser, *_ENCODERS, "vae"), itemsize)
    free, _total = torch.cuda.mem_get_info(run.device)
    return need + DEVICE_MARGIN <= free


def host_bytes_needed(run: PreparedRun, plan: Plan, folder: Path, *, buffer: bool) -> int:
    """Host RAM the overlap holds at its peak in phase 1: the CPU-built denoiser's converted
    tensors (those stored in another dtype: jobs/vram_estimate.converted_bytes), the text
    encoders' converted tensors and, with `buffer`, the host buffer (every denoiser parameter
    in the plan's dtype)."""
    from lorastudio.jobs.host_memory import _SAFETENSORS_DTYPE
    from lorastudio.jobs.vram_estimate import converted_bytes

    itemsize = pick_dtype(plan.base_precision, run.device).itemsize
    name = _SAFETENSORS_DTYPE.get(plan.base_precision, "F32")
    denoiser = run.family.spec.denoiser
    converted = sum(converted_bytes(folder / part, name) for part in (denoiser, *_ENCODERS))
    return converted + (_component_bytes(folder, (denoiser,), itemsize) if buffer else 0)


class EarlyDenoiser:
    """A denoiser built on the CPU whose weights a thread copies beside phases 1-2 (module
    docstring): to the device (`to_device`) or into one host buffer. `finish(device)` returns it
    on the device; `close()` ends the thread and frees what it holds (idempotent; `finish`
    calls it)."""

    def __init__(self, denoiser: Any, build_s: float, device: torch.device, to_device: bool):
        self.denoiser: Any = denoiser
        self.to_device = to_device
        self._build_s = build_s
        self._device = device
        self._stop = threading.Event()
        self._error: Exception | None = None
        self._host = HostBuffer()
        self._copies: dict[int, torch.Tensor] = {}  # id(param or buffer) -> its copy on the device
        self._copy_s = 0.0
        self._thread = threading.Thread(target=self._copy, name="denoiser-early", daemon=True)
        self._thread.start()

    def _tensors(self) -> list[torch.Tensor]:
        """The denoiser's parameters and buffers, each once (tied ones too), that the copy takes."""
        seen: dict[int, torch.Tensor] = {}
        for t in [*self.denoiser.parameters(), *self.denoiser.buffers()]:
            seen.setdefault(id(t), t)
        return [t for t in seen.values() if t.is_contiguous() and t.device.type == "cpu"]

    def _copy(self) -> None:
        t0 = time.perf_counter()
        cuda = self._device.type == "cuda"
        try:
            if self.to_device:
                ring_to_device(self._tensors(), self._device, self._stop, pin=cuda, out=self._copies)
            else:
                self._host.fill(self._tensors(), self._stop, pin=cuda)
        except Stopped:
            pass
        except torch.OutOfMemoryError:  # phases 1-2 took more than DEVICE_MARGIN: the rest after them
            log.warning(
                "denoiser load: the device ran out of memory beside the text encoders after %d of its"
                " tensors; the rest are copied after phase 2",
                len(self._copies),
            )
        except Exception as err:  # noqa: BLE001 - any error: raised again on the main thread by finish()
            self._error = err
        self._copy_s = time.perf_counter() - t0

    def finish(self, device: torch.device) -> tuple[Any, LoadReport]:
        """Join the thread (raising its error, if any), put the denoiser on `device` (its
        parameters and buffers as Module.to does: the thread's copies, else from the host buffer,
        a tensor neither holds by the ordinary copy) and free the buffer. Returns the denoiser on
        `device` and its LoadReport."""
        t0 = time.perf_counter()
        self._thread.join()
        joined = time.perf_counter()
        try:
            if self._error is not None:
                raise self._error
            copies, views, non_blocking = self._copies, self._host.views, self._host.pinned

            def place(t: torch.Tensor) -> torch.Tensor:
                if t.device.type != "cpu":  # a tied tensor, moved at its first place
                    return t.to(device)
                if id(t) in copies:
                    return copies[id(t)]
                if id(t) in views:
                    return views[id(t)].to(device, non_blocking=non_blocking)
                return t.to(device)

            denoiser = self.denoiser._apply(place)  # a tensor the thread did not copy: copied now
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # the host buffer is freed next
        finally:
            self.close()
        end = time.perf_counter()
        report = LoadReport(
            seconds=self._build_s + self._copy_s + (end - joined), waited=self._build_s + (end - t0)
        )
        log.info(
            "denoiser load beside phases 1-2 (%s): build %.2f s, copy %.2f s (%.2f s of it waited for),"
            " then %.2f s to place it",
            "to the device" if self.to_device else "through a host buffer",
            self._build_s, self._copy_s, joined - t0, end - joined,
        )  # fmt: skip
        return denoiser, report

    def close(self) -> None:
        """End the thread (it stops at its next tensor), drop its copies, the CPU-built denoiser
        and the buffer."""
        self._stop.set()
        self._thread.join()
        self._copies = {}
        self._host.release()
        self.denoiser = None


def start_denoiser(
    run: PreparedRun, plan: Plan | None, emit: Emit, enabled: bool = True
) -> EarlyDenoiser | None:
    """The denoiser built on the CPU and its copy started beside phases 1-2 (module docstring),
    ModelLoadStarted("denoiser") emitted first; None where the overlap is refused (the reason
    logged; `enabled`: Settings.early_denoiser). Raises ModelSourceError (the load), as
    build_denoiser would."""
    reason = overlap_refusal(run, plan, enabled)
    if reason is not None or plan is None:
        log.info("denoiser load after phases 1-2: %s", reason)
        return None
    emit(ModelLoadStarted(component="denoiser"))
    cfg = run.cfg
    t0 = time.perf_counter()
    dtype = pick_dtype(plan.base_precision, run.device)
    source = model_source(cfg)
    to_device = device_room(run, plan, Path(str(source)))
    denoiser = run.family.load_denoiser(source, cfg.revision, dtype, torch.device("cpu"))
    return EarlyDenoiser(denoiser, time.perf_counter() - t0, run.device, to_device)
