"""A checkpoint's two kinds of file written so that a failed write reaches the caller as the
OSError it is (ENOSPC, EDQUOT, EFBIG, EROFS, ...), which `errors.writing`, the CLI's handler and
the worker's report then name, instead of a library's exception without an errno.

Why by hand: torch.save to a path writes through its own C++ zip writer, which drops the errno.
A file system out of inodes made `lorastudio train` end in a traceback of RuntimeError "[enforce
fail at inline_container.cc:747] . open file failed with strerror: No space left on device", a
full disk or the file-size limit (`ulimit -f`) in "unexpected pos 576 vs 534". Given a Python
file instead, torch swallows the OSError its write raised and fails on the position check the
same way, so the file handed to it keeps the first OSError and `save_torch_file` raises that.
safetensors' save_file raises SafetensorError with the errno only in its text ("... (os error
28)"): `errors.library_os_error` reads it back, as lora/files.py does for a LoRA file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import safetensors
import safetensors.torch
import torch

from lorastudio.errors import library_os_error


class _KeptErrors:
    """A binary file for torch.save: every byte written (a short write is retried, so the next
    write call raises the reason: EFBIG past the size limit, ENOSPC), the first OSError kept."""

    def __init__(self, raw: Any, path: Path):
        self._raw = raw
        self._path = path
        self.failure: OSError | None = None

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        total = len(view)
        try:
            while view:
                written = self._raw.write(view)
                view = view[written:]
        except OSError as err:
            if self.failure is None:
                self.failure = (
                    err if err.filename is not None else OSError(err.errno, err.strerror, str(self._path))
                )
            raise
        return total

    def flush(self) -> None:
        """Nothing buffered here: each write went to the file."""


def save_torch_file(obj: Any, path: Path) -> None:
    """torch.save `obj` to `path` (a new file). Raises the OSError of the open or of a write
    (naming `path`) where torch's writer would hide it; other torch errors pass unchanged. A
    failed write leaves the partial file, which the caller's staging folder takes away."""
    with open(path, "wb", buffering=0) as raw:  # the open's own OSError: no inode left, read-only
        out = _KeptErrors(raw, path)
        try:
            torch.save(obj, out)
        except RuntimeError as err:
            if out.failure is not None:
                raise out.failure from err
            raise


def save_tensors_file(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """safetensors' save_file of `tensors` to `path`, its I/O error raised as the OSError it
    names (naming `path`); another SafetensorError passes unchanged."""
    try:
        safetensors.torch.save_file(tensors, str(path))  # looked up at the call, as before
    except safetensors.SafetensorError as err:
        raise library_os_error(err, path) or err from err
