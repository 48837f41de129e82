"""What this host can run: the accelerator, how many GPUs, and the base precisions it supports.

Contract of `host_info()`: the HostInfo of the GPUs this process would use (GPU 0 names the host),
never a GPU that was not seen, answered once per CUDA_VISIBLE_DEVICES value and then from the
cache. Nothing here allocates GPU memory beyond the driver query.

- A host that cannot have a CUDA device (`cuda_impossible`: macOS, or Linux without the NVIDIA
  kernel driver's /proc/driver/nvidia nor ROCm's /dev/kfd, which torch.cuda also drives) is "cpu",
  asked of nobody.
- Elsewhere torch is asked (jobs/gpu_probe.facts: the devices as CUDA_VISIBLE_DEVICES and torch's
  build see them; nvidia-smi would not) in a short child, `python -m lorastudio.jobs.gpu_probe`
  (PROBE_COMMAND), without the server's secrets, bounded by PROBE_TIMEOUT_S (then killed) and
  by PROBE_OUTPUT_KEPT bytes of each output stream kept, read as bytes: the
  API server never imports torch (routes know no torch). A process that trains in itself anyway
  (the CLI's train) asks its own torch instead (`probe_in_this_process`).
- One probe at a time in a process: a request that needs the answer while the probe runs waits
  for it and shares it (the preflight, a start, a resume, GET /api/info, a caption job's
  placement); `known_host_info` answers without waiting when no probe is needed, so that the
  server's routes await a probe without holding a request thread (api/host_wait.py's
  dependency, before their synchronous work calls host_info).
- A probe that fails, runs past its bound or answers what is not understood gives a "cpu" HostInfo
  named "GPU facts unknown: <why>" (the checks' no-GPU path: no GPU is claimed), asked again by
  the first request after RETRY_S.
- A caller that must not wait for a probe in its own thread (a server request: api/host_wait.py
  marks each one with `forbid_probe_waits` and allows it once the answer was awaited) that reaches
  `host_info` anyway is logged once per place (a probe then holds that request's thread); with
  STRICT_PROBE_WAITS (the test suite) it is refused even when the answer is known, so a route that
  forgot the wait fails its tests on a CPU host, where the answer is always at hand.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import IO, Any

from lorastudio import json_read
from lorastudio.processes import keep_working_folder

log = logging.getLogger("lorastudio.jobs")

# The same thresholds as the engine's training/precision.py (the job service does not import
# the engine): bf16 on compute capability 8.0+, fp8 matmuls on 8.9+ (Ada / Hopper).
_BF16_MIN_CAPABILITY = (8, 0)
_FP8_MIN_CAPABILITY = (8, 9)

PROBE_COMMAND = [sys.executable, "-m", "lorastudio.jobs.gpu_probe"]  # the child (tests: a fake)
PROBE_TIMEOUT_S = 60.0  # torch's import is ~5 s of CPU, 20 s measured on a loaded 2-core host
PROBE_OUTPUT_KEPT = 64 * 1024  # bytes of each of the child's streams kept (the answer is its last line)
OUTPUT_DRAIN_S = 10.0  # after the child's exit, the most its output is waited for (at most a pipe's 64 KiB)
RETRY_S = 30.0  # an unknown answer is asked again by the first request after this
UNKNOWN = "GPU facts unknown"
STRICT_PROBE_WAITS = False  # the test suite: a forbidden host_info() raises ProbeWaitForbidden

# Where host_info() must not wait for a probe in the caller's thread (a request's "METHOD path"),
# None where it may (threads started outside a request do not inherit it: threading copies no
# context). Set per request by api/host_wait.py, copied into that request's worker threads.
_no_probe_waits: ContextVar[str | None] = ContextVar("lorastudio_no_probe_waits", default=None)
_waits_told: set[str] = set()


class ProbeWaitForbidden(RuntimeError):
    """host_info() reached where a probe must not be waited for in the caller's thread (a server
    route without api/host_wait.HOST_KNOWN): a programming error, raised under STRICT_PROBE_WAITS."""


def forbid_probe_waits(where: str) -> None:
    """From here on in this context, host_info() must find its answer known (`where` names the
    caller in the log and the error)."""
    _no_probe_waits.set(where)


def allow_probe_waits() -> None:
    """host_info() may ask again in this context (its answer was awaited without a thread)."""
    _no_probe_waits.set(None)


def _check_probe_wait(known: bool) -> None:
    where = _no_probe_waits.get()
    if where is None:
        return
    if STRICT_PROBE_WAITS:
        raise ProbeWaitForbidden(
            f"host_info() reached in {where} without awaiting the GPU facts first "
            "(name api/host_wait.HOST_KNOWN in the route's dependencies)"
        )
    if not known:
        with _lock:
            first = where not in _waits_told
            _waits_told.add(where)
        if first:
            log.warning("%s waits for the GPU probe in a request thread (no HOST_KNOWN)", where)


_answers: dict[str | None, tuple[HostInfo, float]] = {}  # CUDA_VISIBLE_DEVICES: (answer, ask again at)
_lock = threading.Lock()  # guards _answers and probes
_one_probe = threading.Lock()  # one probe at a time: its waiters find its answer cached
_here = False  # probe_in_this_process was called
probes = 0  # probes made, child or here (tests read it)


@dataclass(frozen=True)
class HostInfo:
    """device: "cuda" or "cpu"; name: GPU 0's name, "cpu", or "GPU facts unknown: <why>" (a
    failed probe: device "cpu"); memory_gb: memory of GPU 0 (None on
    CPU); precisions: the base_precision values a run can use here ("auto" always); gpu_count:
    CUDA GPUs visible to this process (0 on a CPU host); gpu_memory_gb: the total memory of each
    of them in GiB, by index (the caption jobs' placement, jobs/caption_gpu.py); capability: GPU
    0's compute capability (the attention kernels it has: config_host); gpus: (name, memory GiB,
    capability) of each visible GPU, by index (jobs/run_host.py: the facts of the GPU a run uses)."""

    device: str
    name: str
    memory_gb: float | None
    precisions: tuple[str, ...]
    gpu_count: int = 0
    gpu_memory_gb: tuple[float, ...] = ()
    # GPU 0's compute capability (None: no GPU, or not known); not part of the answer's equality
    capability: tuple[int, int] | None = field(default=None, compare=False)
    gpus: tuple[tuple[str, float, tuple[int, int]], ...] = field(default=(), compare=False)

    def public(self) -> dict[str, Any]:
        """HostOut: with the optimizers and compile modes a run can use here (config_choices)."""
        from lorastudio.config_choices import host_choices

        return {
            "device": self.device,
            "name": self.name,
            "memory_gb": self.memory_gb,
            "precisions": list(self.precisions),
            "gpu_count": self.gpu_count,
            **host_choices(self.device, self.capability),
            "run_choices": self.run_choices(),
        }

    def run_choices(self) -> list[dict[str, Any]]:
        """Item k-1: the precisions and host_choices of a run over the first k GPUs (k = 1 ..
        the GPUs with known facts), the weakest of them (jobs/run_host.host_for_run, as the job
        service judges a `num_gpus` run: RELIABILITY 1188); [] off CUDA or without per-GPU facts."""
        from lorastudio.config_choices import host_choices
        from lorastudio.jobs.run_host import host_for_run

        if self.device != "cuda":
            return []
        runs = [host_for_run(self, None, k) for k in range(1, len(self.gpus) + 1)]
        return [{"precisions": list(r.precisions), **host_choices(r.device, r.capability)} for r in runs]


def precisions_for(device: str, capability: tuple[int, int] | None = None) -> tuple[str, ...]:
    """The base_precision values a device runs. CPU: fp32, bf16 and the quantised int8 / nf4
    (bf16 compute). CUDA of compute `capability`: fp32, fp16; bf16, int8 and nf4 from 8.0 (they
    compute in bf16); fp8 from 8.9 (fp8 tensor cores)."""
    if device != "cuda":
        return ("auto", "fp32", "bf16", "int8", "nf4")
    cap = capability or (0, 0)
    precisions = ["auto", "fp32", "fp16"]
    if cap >= _BF16_MIN_CAPABILITY:
        precisions.append("bf16")
    if cap >= _FP8_MIN_CAPABILITY:
        precisions.append("fp8")
    if cap >= _BF16_MIN_CAPABILITY:
        precisions += ["int8", "nf4"]
    return tuple(precisions)


def cuda_impossible() -> bool:
    """True when this host certainly has no device torch.cuda could use, known without importing
    torch: macOS (no CUDA build of torch), or Linux with neither the NVIDIA kernel driver
    (/proc/driver/nvidia) nor the ROCm one (/dev/kfd; torch.cuda runs ROCm too). Elsewhere
    (Windows, a Linux host with a driver) only torch can tell, so False."""
    if sys.platform == "darwin":
        return True
    return sys.platform.startswith("linux") and not (
        os.path.exists("/proc/driver/nvidia") or os.path.exists("/dev/kfd")
    )


CPU_HOST = HostInfo("cpu", "cpu", None, precisions_for("cpu"), gpu_count=0)


def host_info() -> HostInfo:
    """This process's accelerator (see the module docstring): "cpu" without asking when
    `cuda_impossible`; else torch's answer for the current CUDA_VISIBLE_DEVICES, probed once (one
    probe at a time; waiters share it) and cached; an unknown answer is a "cpu" HostInfo named
    "GPU facts unknown: <why>". In a context that forbids probe waits (`forbid_probe_waits`)
    it is logged, or raised under STRICT_PROBE_WAITS."""
    _check_probe_wait(known_host_info() is not None)
    if cuda_impossible():
        return CPU_HOST
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if (known := _cached(visible)) is not None:
        return known
    global probes
    with _one_probe:
        if (known := _cached(visible)) is not None:  # the probe this request waited for
            return known
        with _lock:
            probes += 1
        started = time.monotonic()
        host, why, versions = _probe()
        if why is None:
            log.info(
                "GPU probe (CUDA_VISIBLE_DEVICES=%s): %s (%s) in %.1f s",
                visible,
                _words(host),
                versions,
                time.monotonic() - started,
            )
        else:
            log.warning("%s (CUDA_VISIBLE_DEVICES=%s); asked again in %g s", host.name, visible, RETRY_S)
        with _lock:
            _answers[visible] = (host, math.inf if why is None else time.monotonic() + RETRY_S)
        return host


def known_host_info() -> HostInfo | None:
    """`host_info()`'s answer when it needs no probe now (a host that cannot have CUDA, or the
    answer cached for the current CUDA_VISIBLE_DEVICES); None when a probe would run (or runs):
    an async caller then waits for `host_info` without holding a request thread meanwhile."""
    if cuda_impossible():
        return CPU_HOST
    return _cached(os.environ.get("CUDA_VISIBLE_DEVICES"))


def host_for_device(device: str | None, num_gpus: int = 1) -> HostInfo:
    """The HostInfo of the device a run trains on: CPU_HOST for a "cpu" device (`lorastudio train
    --device cpu`, also on a GPU host: its weights and activations live in host RAM and "auto"
    precision is fp32 there, so the forecast and the host RAM check are the CPU's), else
    `host_info()` as the run sees it (jobs/run_host.host_for_run: `cuda:N` judged on GPU N's
    facts, a `num_gpus` run on its weakest GPU's)."""
    if device is not None and device.strip().lower().split(":", 1)[0] == "cpu":
        return CPU_HOST
    from lorastudio.jobs.run_host import host_for_run

    return host_for_run(host_info(), device, num_gpus)


def probe_in_this_process() -> None:
    """host_info asks this process's own torch from now on: for a process that imports torch
    anyway (the CLI's train), where a child would import it a second time."""
    global _here
    _here = True


def host_from_facts(facts: Mapping[str, Any]) -> HostInfo:
    """The HostInfo of a jobs/gpu_probe answer: "cuda" when torch saw at least one GPU, named by
    GPU 0, else "cpu". Raises ValueError (in words) on an answer of another form."""
    try:
        devices = facts["devices"] if facts["cuda"] is True else []
        if not isinstance(devices, list):
            raise TypeError("devices is not a list")
        seen = []
        for device in devices:
            name, memory, (major, minor) = device["name"], device["total_memory"], device["capability"]
            if not (isinstance(name, str) and isinstance(memory, int) and memory > 0):
                raise TypeError(f"device {device!r}")
            if not (isinstance(major, int) and isinstance(minor, int)):
                raise TypeError(f"capability {device['capability']!r}")
            seen.append((name, round(memory / 2**30, 1), (major, minor)))
    except (KeyError, TypeError, ValueError, OverflowError) as err:  # OverflowError: a size past a float's
        raise ValueError(f"the GPU probe's answer is not understood ({type(err).__name__}: {err})") from None
    if not seen:
        return CPU_HOST
    name, memory_gb, capability = seen[0]
    return HostInfo(
        "cuda",
        name,
        memory_gb,
        precisions_for("cuda", capability),
        gpu_count=len(seen),
        gpu_memory_gb=tuple(gb for _, gb, _ in seen),
        capability=capability,
        gpus=tuple(seen),
    )


def _cached(visible: str | None) -> HostInfo | None:
    with _lock:
        host, ask_again = _answers.get(visible, (None, 0.0))
    return host if host is not None and time.monotonic() < ask_again else None


def _probe() -> tuple[HostInfo, str | None, str]:
    """(the answer, None, torch's and CUDA's versions in words), or (the unknown answer, why, "")."""
    try:
        if _here:
            from lorastudio.jobs.gpu_probe import facts

            seen = facts()
        else:
            seen = _ask_child()
        versions = f"torch {seen.get('torch')}, CUDA {seen.get('cuda_version')}"
        return host_from_facts(seen), None, versions
    except (RuntimeError, OSError, ImportError, ValueError) as err:  # torch's driver errors are RuntimeError
        why = str(err) or type(err).__name__
        return HostInfo("cpu", f"{UNKNOWN}: {why}", None, precisions_for("cpu"), gpu_count=0), why, ""


def _ask_child() -> Mapping[str, Any]:
    """The child's facts (PROBE_COMMAND's last line of output, a JSON object). Raises
    RuntimeError in words: it failed, ran past PROBE_TIMEOUT_S (killed) or answered no JSON.
    Its output is read as bytes and only the last PROBE_OUTPUT_KEPT of each stream kept (a child
    that prints without end costs no memory; bytes that are not UTF-8, a library's banner, do not
    hide the answer after them)."""
    from lorastudio.jobs.childenv import child_environment

    keep_working_folder()  # the child imports torch: not in a deleted folder
    try:
        child = subprocess.Popen(
            PROBE_COMMAND,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_environment(os.environ),
        )
    except OSError as err:
        raise RuntimeError(f"the GPU probe could not start ({err})") from None
    tails = [_Tail(child.stdout), _Tail(child.stderr)]  # type: ignore[arg-type]
    try:
        code = child.wait(PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        raise RuntimeError(
            f"the GPU probe (torch, in a child process) gave no answer in {PROBE_TIMEOUT_S:g} s"
        ) from None
    finally:
        for tail in tails:
            tail.join(OUTPUT_DRAIN_S)
    stdout, stderr = (tail.text() for tail in tails)
    last = (stdout.strip().splitlines() or [""])[-1]
    if code != 0:
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the GPU probe failed (exit code {code}: {tail[-300:]})")
    try:
        facts = json_read.loads(last)
    except ValueError:
        facts = None
    if not isinstance(facts, dict):
        raise RuntimeError(f"the GPU probe's answer is not a JSON object: {last[-300:]!r}")
    return facts


class _Tail:
    """Reads a child's pipe to its end in a thread, keeping its last PROBE_OUTPUT_KEPT bytes."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self._pipe = pipe
        self._kept = bytearray()
        self._thread = threading.Thread(target=self._read, name="lorastudio-gpu-probe-output", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            with contextlib.suppress(OSError):
                while chunk := os.read(self._pipe.fileno(), 1 << 16):
                    self._kept += chunk
                    del self._kept[:-PROBE_OUTPUT_KEPT]
        finally:
            self._pipe.close()

    def join(self, timeout: float) -> None:
        """Wait up to `timeout` s for the end of the output (a grandchild that keeps the pipe open
        is not waited for longer: its reader ends with it)."""
        self._thread.join(timeout)

    def text(self) -> str:
        return bytes(self._kept).decode("utf-8", "replace")


def _words(host: HostInfo) -> str:
    if host.device != "cuda":
        return "no CUDA GPU"
    return f"{host.gpu_count} GPU(s), GPU 0 {host.name} ({host.memory_gb} GiB)"


def resolved_dtype(base_precision: str, host: HostInfo) -> str:
    """The precision the frozen base runs in: "auto" is bf16 on a bf16-capable GPU, else fp32;
    any other value is returned as given (fp8 / int8 / nf4 compute in bf16: see
    training/precision.py)."""
    if base_precision != "auto":
        return base_precision
    return "bf16" if host.device == "cuda" and "bf16" in host.precisions else "fp32"
