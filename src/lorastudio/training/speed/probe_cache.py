"""The attention probe's results kept on disk, so a later run on the same machine skips the probe.

"auto" probes cuDNN (and FA4) in a child process at the run's shapes (training/speed/attention.py):
8-25 s on an H200, half of it FA4's JIT (bench note 23). The result depends only on the GPU, the
software that runs the kernels and the shapes, so it is stored under the studio home
(cache/attention-probe/<hash>.json) keyed by: the GPU's name and compute capability, the NVIDIA
driver version, torch's version with its CUDA and cuDNN versions, the versions of flash-attn-4 and
nvidia-cutlass-dsl (FA4's kernels), the probe's format, the dtype, the shapes and the kernels
probed. Any change of one of them is another key: the probe runs again.

Stored: only a probe that ran to its end (every kernel has a result line and the child exited 0);
a crash, a timeout or a child that could not start is never cached (the next run probes again).
A kernel that failed its check at these shapes is a result and is cached. Files are written to a
hidden temporary name and renamed (concurrent ranks or runs leave one complete file); a file that
cannot be read or written is ignored (logged): the cache only ever saves time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from lorastudio import json_read
from lorastudio.staged_files import staging_path
from lorastudio.training.speed.attention import KernelProbe

log = logging.getLogger(__name__)

FORMAT = 2  # the probe's output and choice rules (bump when training/speed/attention_probe.py changes)
_PACKAGES = ("flash-attn-4", "nvidia-cutlass-dsl")


@cache
def _driver_version() -> str:
    """The NVIDIA kernel driver's version line (Linux), else the CUDA driver API version."""
    try:
        first = Path("/proc/driver/nvidia/version").read_text(encoding="utf-8").splitlines()[0]
        return " ".join(first.split())
    except (OSError, IndexError):
        getter = getattr(torch._C, "_cuda_getDriverVersion", None)
        return f"cuda-driver-api {getter()}" if getter is not None else "unknown"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def gpu_facts(device: torch.device) -> dict[str, Any]:
    """What identifies the GPU and the software running the kernels (the CUDA boundary: tests
    replace this function)."""
    major, minor = torch.cuda.get_device_capability(device)
    return {
        "gpu": torch.cuda.get_device_name(device),
        "capability": f"{major}.{minor}",
        "driver": _driver_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        **{name: _version(name) for name in _PACKAGES},
    }


def probe_key(
    device: torch.device, dtype: torch.dtype, shapes: list[tuple[int, int, int, int]], kernels: list[str]
) -> dict[str, Any]:
    """The cache key of a probe: gpu_facts + the probe's format, dtype, shapes and kernels."""
    return {
        **gpu_facts(device),
        "format": FORMAT,
        "dtype": str(dtype).removeprefix("torch."),
        "shapes": [list(s) for s in shapes],
        "kernels": list(kernels),
    }


def probe_finished(results: dict[str, KernelProbe]) -> bool:
    """Whether a probe ran to its end: no kernel failed for a reason of the parent's (the child
    crashed, timed out or could not start: "the probe ..."; the child's own start "no <kernel>"
    or name the difference)."""
    return not any(not r.ok and str(r.reason or "").startswith("the probe ") for r in results.values())


class ProbeCache:
    """Probe results under `folder` (the studio home's cache/attention-probe)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def _path(self, key: dict[str, Any]) -> Path:
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
        return self.folder / f"{digest}.json"

    def get(self, key: dict[str, Any]) -> dict[str, KernelProbe] | None:
        """The stored results of `key`, or None (none stored, unreadable, another key's)."""
        path = self._path(key)
        try:
            data = json_read.loads(path.read_text(encoding="utf-8"))
            if data.get("key") != json_read.loads(json.dumps(key)):
                return None
            return {
                name: KernelProbe(bool(r["ok"]), r.get("reason"), r.get("ms"))
                for name, r in data["results"].items()
            }
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            log.warning("attention probe cache: ignoring %s (%s)", path, err)
            return None

    def put(self, key: dict[str, Any], results: dict[str, KernelProbe]) -> None:
        """Store `results` under `key` (staged, then renamed); a write that fails is logged."""
        path = self._path(key)
        data = {
            "key": key,
            "results": {n: {"ok": r.ok, "reason": r.reason, "ms": r.ms} for n, r in results.items()},
        }
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            staged = staging_path(path)  # staged_files.py: a killed writer's is removed at a server start
            try:
                with open(staged, "w", encoding="utf-8") as fh:
                    json.dump(data, fh, indent=1)
                os.replace(staged, path)
            except BaseException:
                Path(staged).unlink(missing_ok=True)
                raise
        except OSError as err:
            log.warning("attention probe cache: cannot write %s (%s)", path, err)
