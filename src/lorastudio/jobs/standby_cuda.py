"""What the standby worker's imports did to CUDA, and whether that bars it from waiting.

The rule (jobs/standby.py): a standby waits holding no GPU memory. Importing torch does not
initialise CUDA, but on a GPU host some library imports do: torchao (which transformers' and
peft's imports pull in) evaluates `torch.cuda.get_device_capability()` and `has_triton()` at
module level (torchao/prototype/mx_formats/kernels.py), and either runs torch's CUDA lazy init
(RESULTS note 33: every standby on an H100 host died with code 4). A fresh worker runs the same
imports first and ends in the same state, so CUDA initialised by an import is not a difference
between the two; what matters is a CUDA context (GPU memory, a process in nvidia-smi) held while
the standby waits. Lazy init creates none by itself (cudaGetDeviceProperties needs none); torch
can say, without creating one, whether a device's primary context exists
(`torch._C._cuda_hasPrimaryContext`). So the standby is used when no visible device has a
context, and exits (CUDA_BY_IMPORT_EXIT) when one does or when torch cannot tell.

Written by hand: no library traces which import first ran torch's lazy init.
"""

from __future__ import annotations

import traceback
from typing import Any


class CudaInitTrace:
    """Which PRELOAD module was being imported when torch's CUDA lazy init first ran, and the
    innermost frames of that call (torch.cuda._lazy_init wrapped while the standby imports: the
    torch calls that initialise CUDA go through it). `importing` is set by the caller before
    each import; `install` then `restore` bracket the imports."""

    def __init__(self) -> None:
        self.importing = ""
        self.importing_at_init: str | None = None
        self.where: list[str] = []
        self._torch: Any = None
        self._orig: Any = None

    def install(self) -> None:
        try:
            import torch.cuda
        except ImportError:
            return
        self._torch, self._orig = torch, torch.cuda._lazy_init

        def traced() -> None:
            if self.importing_at_init is None and not self._torch.cuda.is_initialized():
                self.importing_at_init = self.importing
                self.where = [line.strip() for line in traceback.format_stack(limit=12)[:-1]][-6:]
            self._orig()

        torch.cuda._lazy_init = traced

    def restore(self) -> None:
        if self._torch is not None:
            self._torch.cuda._lazy_init = self._orig


def trace_cuda_init() -> CudaInitTrace:
    """A trace installed now (a no-op one where torch is not importable)."""
    trace = CudaInitTrace()
    trace.install()
    return trace


def devices_with_context(torch: Any) -> list[int] | None:
    """The visible CUDA devices on which this process holds a primary context, asked without
    creating one; None when torch cannot tell (a build without `_cuda_hasPrimaryContext`).
    Call only once CUDA is initialised (device_count is then cached, not a new driver query)."""
    has_context = getattr(torch._C, "_cuda_hasPrimaryContext", None)
    if has_context is None:
        return None
    return [index for index in range(torch.cuda.device_count()) if has_context(index)]


def barred_by_cuda(torch: Any) -> bool:
    """True when a standby must not wait: CUDA initialised and a context held (or unknowable)."""
    if torch is None or not torch.cuda.is_initialized():
        return False
    held = devices_with_context(torch)
    return held is None or bool(held)
