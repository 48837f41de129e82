"""`attention_backend = "auto"`'s probe, started before the models load and cached on disk.

The probe (training/speed/attention.py, child training/speed/attention_probe.py) took 22 s of FLUX.1's 98 s
to the first step on an H200, half of it FA4's JIT (bench note 23), all of it after the denoiser
had loaded. Here the run
- asks the probe cache first (training/speed/probe_cache.py): a hit decides without a child;
- otherwise starts the child as the run begins (`start_attention`, before the text encoders
  load), with "hold": it checks every kernel (the slow part: CUDA context, cuDNN plans, FA4's
  JIT) while the run loads its encoders, encodes captions, caches latents and loads the
  denoiser, then waits; `PendingAttention.result` (after the denoiser is built) releases it,
  so the timing runs while the run's GPU is quiet, and takes the choice (pick_kernel). The run
  waits only for what is left of the checks;
- stores a finished probe's results in the cache.
The shapes come from the base model's denoiser config (Family.checkpoint_facts) and the plan's
micro-batch; when the built denoiser's differ (or no plan is known before the models load: a
memory budget) the probe runs at the build's shapes then, as before (through the cache too).

An abandoned probe (an error or a stop before the denoiser phase) is killed when its
PendingAttention is closed or collected; a child whose parent died sees EOF and exits.
FA4's own JIT cache (attention_fa4.keep_fa4_cache) lets the run load the kernels the probe built.
"""

from __future__ import annotations

import collections
import json
import logging
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import torch

from lorastudio.config_datasets import top_resolution
from lorastudio.errors import ModelSourceError
from lorastudio.families.single_file import model_source
from lorastudio.processes import keep_working_folder
from lorastudio.training.planning.plan import Plan
from lorastudio.training.precision import pick_dtype
from lorastudio.training.preflight import PreparedRun
from lorastudio.training.speed import attention
from lorastudio.training.speed.attention import AttentionChoice, KernelProbe, pick_kernel, read_probe_output
from lorastudio.training.speed.probe_cache import ProbeCache, probe_finished, probe_key

log = logging.getLogger(__name__)

PROBE_COMMAND = [sys.executable, "-m", "lorastudio.training.speed.attention_probe"]  # + the spec (JSON)
TIMING_S = 60.0  # the most the released child may take to time the kernels and exit
HOLD_S = 7 * 24 * 3600.0  # the held child waits for phases 1-2 of any size (EOF ends it sooner)
Shapes = list[tuple[int, int, int, int]]


def run_shapes(run: PreparedRun, plan: Plan, denoiser_config: Mapping[str, Any]) -> Shapes:
    """The attention shapes a run's denoiser sees (attention.probe_shapes): the micro-batch, the
    denoiser's heads and head dim, image tokens at the run's largest resolution (+ an edit run's
    control tokens, + the text tokens)."""
    spec, cfg = run.family.spec, run.cfg  # resolved: resolution and max_sequence_length filled
    side = top_resolution(cfg.resolution) // (spec.vae_scale_factor * spec.patch_size)
    text = int(cfg.max_sequence_length or 0)  # None for SDXL, whose U-Net gives no shapes anyway
    image = side * side * (1 + run.scan.controls_per_image())  # control tokens join the sequence
    if run.scan.controls_sized():  # controls of their own sizes: the most control tokens of a sample
        cell = spec.vae_scale_factor * spec.patch_size
        own = max(sum((w // cell) * (h // cell) for w, h in it.control_sizes) for it in run.scan.items)
        image = side * side + own
    return attention.probe_shapes(dict(denoiser_config), image, text, plan.micro_batch_size)


def choose_cached(
    requested: str,
    device: torch.device,
    dtype: torch.dtype,
    shapes: Shapes,
    masked: bool,
    cache: ProbeCache | None,
) -> AttentionChoice:
    """attention.choose_attention with the probe cache: a stored result decides; a probe that ran
    to its end is stored."""
    settled = attention.settled_choice(requested, device, dtype, shapes, masked)
    if settled is not None:
        return settled
    kernels = attention.probe_kernels(device)
    key = probe_key(device, dtype, shapes, kernels) if cache is not None else None
    results = cache.get(key) if cache is not None and key is not None else None
    if results is None:
        results = attention.probe_attention(device, dtype, shapes, kernels)
        if cache is not None and key is not None and probe_finished(results):
            cache.put(key, results)
    else:
        log.info("attention: the probe's results at these shapes come from the cache")
    return pick_kernel(results)


def _kill(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


class RunningProbe:
    """The probe child, started with "hold" (see the module docstring)."""

    def __init__(self, device: torch.device, dtype: torch.dtype, shapes: Shapes, kernels: list[str]) -> None:
        spec = {
            "device": str(device),
            "dtype": str(dtype).removeprefix("torch."),
            "shapes": shapes,
            "kernels": kernels,
            "time": len(kernels) > 1,
            "hold": True,
            "hold_timeout_s": HOLD_S,
        }
        self.kernels = kernels
        self.started = time.monotonic()
        self.lines: list[str] = []
        self.errors: collections.deque[str] = collections.deque(maxlen=20)  # the child's last stderr lines
        self.ready = threading.Event()
        keep_working_folder()  # the child imports torch: not in a deleted folder
        self.proc = subprocess.Popen(
            [*PROBE_COMMAND, json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            encoding="utf-8",  # not the locale's (RELIABILITY 1029)
            errors="replace",
            env=attention.probe_environment(),  # without the secrets (RELIABILITY 1011)
        )
        stdin, stdout, stderr = self.proc.stdin, self.proc.stdout, self.proc.stderr
        if stdin is None or stdout is None or stderr is None:  # Popen gives every PIPE asked for
            _kill(self.proc)
            raise OSError("the attention probe child started without its pipes")
        self._stdin: IO[str] = stdin
        self._readers = [
            threading.Thread(target=self._read, args=(stdout,), name="attention-probe-out", daemon=True),
            threading.Thread(
                target=self._read_errors, args=(stderr,), name="attention-probe-err", daemon=True
            ),
        ]
        for reader in self._readers:
            reader.start()
        self._finalizer = weakref.finalize(self, _kill, self.proc)

    def _read(self, stdout: IO[str]) -> None:
        for line in stdout:
            self.lines.append(line)
            if line.startswith('{"ready"'):
                self.ready.set()
        self.ready.set()  # EOF: the child exited

    def _read_errors(self, stderr: IO[str]) -> None:
        for line in stderr:
            self.errors.append(line)

    def finish(self) -> dict[str, KernelProbe]:
        """Wait for the checks (up to PROBE_TIMEOUT_S from the start), release the timing, and
        return each kernel's KernelProbe (a timeout fails every kernel with the reason)."""
        left = self.started + attention.PROBE_TIMEOUT_S - time.monotonic()
        if not self.ready.wait(max(0.0, left)):
            self.close()
            return self._failed(f"the probe did not finish in {attention.PROBE_TIMEOUT_S:.0f} s")
        waited = time.monotonic()
        try:
            self._stdin.write("go\n")
            self._stdin.close()
        except OSError:  # the child is gone already (it crashed, or had nothing to time)
            pass
        try:
            self.proc.wait(TIMING_S)
        except subprocess.TimeoutExpired:
            self.close()
            return self._failed(f"the probe did not finish timing in {TIMING_S:.0f} s")
        for reader in self._readers:
            reader.join(5.0)
        results = read_probe_output(
            "".join(self.lines), "".join(self.errors), self.proc.returncode, self.kernels
        )
        log.info(
            "attention probe: %.1f s in the child, %.1f s of it after the run was ready for it",
            time.monotonic() - self.started,
            time.monotonic() - waited,
        )
        return results

    def _failed(self, reason: str) -> dict[str, KernelProbe]:
        return {k: KernelProbe(False, reason) for k in self.kernels}

    def close(self) -> None:
        """Kill the child if it still runs."""
        self._finalizer()


@dataclass
class PendingAttention:
    """The attention choice of a run, decided now (`decided`) or by a running probe."""

    requested: str
    device: torch.device
    dtype: torch.dtype | None = None
    shapes: Shapes = field(default_factory=list)
    masked: bool = False
    cache: ProbeCache | None = None
    decided: AttentionChoice | None = None
    running: RunningProbe | None = None
    key: dict[str, Any] | None = None

    def result(self, dtype: torch.dtype, shapes: Shapes) -> AttentionChoice:
        """The run's AttentionChoice at the built denoiser's `shapes` and `dtype`: this probe's
        when it was started for them, else choose_cached's now."""
        same = dtype == self.dtype and shapes == self.shapes
        if same and self.decided is not None:
            return self.decided
        running = self.running
        if not same or running is None:
            self.close()
            return choose_cached(self.requested, self.device, dtype, shapes, self.masked, self.cache)
        results = running.finish()
        self.running = None
        if self.cache is not None and self.key is not None and probe_finished(results):
            self.cache.put(self.key, results)
        return pick_kernel(results)

    def close(self) -> None:
        if self.running is not None:
            self.running.close()
            self.running = None


def start_choice(
    requested: str,
    device: torch.device,
    dtype: torch.dtype,
    shapes: Shapes,
    masked: bool,
    cache: ProbeCache | None,
) -> PendingAttention:
    """Decide what needs no probe, or what the cache knows; else start the held probe child."""
    pending = PendingAttention(requested, device, dtype, shapes, masked, cache)
    pending.decided = attention.settled_choice(requested, device, dtype, shapes, masked)
    if pending.decided is not None:
        return pending
    kernels = attention.probe_kernels(device)
    if cache is not None:
        pending.key = probe_key(device, dtype, shapes, kernels)
        stored = cache.get(pending.key)
        if stored is not None:
            log.info("attention: the probe's results at these shapes come from the cache")
            pending.decided = pick_kernel(stored)
            return pending
    pending.running = RunningProbe(device, dtype, shapes, kernels)
    return pending


def start_attention(run: PreparedRun, plan: Plan | None, cache_dir: Path | None) -> PendingAttention:
    """The run's pending attention choice, started as the run begins (see the module docstring).
    Without a plan yet (a memory budget) or the denoiser's config (unreadable), nothing starts:
    `result` chooses at the built denoiser's shapes."""
    cache = ProbeCache(cache_dir) if cache_dir is not None else None
    cfg, spec = run.cfg, run.family.spec
    pending = PendingAttention(cfg.attention_backend, run.device, masked=spec.masked_attention, cache=cache)
    if plan is None or cfg.attention_backend != "auto" or run.device.type != "cuda":
        return pending
    try:
        facts = run.family.checkpoint_facts(model_source(cfg), cfg.revision)
    except ModelSourceError as err:
        log.info("attention: the probe waits for the denoiser (%s)", err)
        return pending
    prefix = f"{spec.denoiser}."
    config = {k[len(prefix) :]: v for k, v in facts.items() if k.startswith(prefix)}
    dtype = pick_dtype(plan.base_precision, run.device)
    return start_choice(
        cfg.attention_backend, run.device, dtype, run_shapes(run, plan, config), spec.masked_attention, cache
    )
