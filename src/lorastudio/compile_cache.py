"""Which folder holds Inductor's on-disk compile cache for a run: the user's
TORCHINDUCTOR_CACHE_DIR, else the studio's `<home>/cache/inductor` (training/speed/compile.
keep_compile_cache sets it; jobs/time_forecast asks whether it holds anything). Torch-free.

Inductor writes its own default (`<tmp>/torchinductor_<user>`) into the environment when it is
imported (torch._inductor.runtime.cache_dir_utils.cache_dir, reached by diffusers' import), so
that value in a process that imported it is not the user's choice: taken for one, it sent a CLI
run's and a fresh worker's compiles to /tmp, never the studio's folder (RELIABILITY 1010). A user
who names that very folder gets the studio's. Nor is a folder the studio itself set in this
process (`note_studio_cache`, by an earlier run's keep_compile_cache): a second train() in one
process with another home (the Python API, the test suite) compiled into the first home's folder
(RELIABILITY 1012).
"""

from __future__ import annotations

import getpass
import os
import re
import tempfile
from pathlib import Path


def inductor_default_cache() -> str:
    """Inductor's own default folder, as torch computes it (cache_dir_utils.default_cache_dir,
    restated so that the server, which never imports torch, can tell it too; the test compares
    the two)."""
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        getuid = getattr(os, "getuid", None)
        user = f"uid_{getuid()}" if callable(getuid) else "unknown_user"
    return os.path.abspath(
        os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))
    )


_studio_set: set[str] = set()  # the folders keep_compile_cache put in this process's environment


def note_studio_cache(folder: str) -> None:
    """Record that the studio itself put `folder` in TORCHINDUCTOR_CACHE_DIR (not a user's choice),
    and drop a TRITON_CACHE_DIR that Inductor derived from an unchosen folder (it derives it again
    from `folder` at its next first kernel); the user's own Triton folder stays."""
    _studio_set.add(os.path.abspath(folder))
    triton = os.environ.get("TRITON_CACHE_DIR")
    if triton and derived_from_unchosen(triton) and not triton.startswith(os.path.abspath(folder)):
        del os.environ["TRITON_CACHE_DIR"]


def derived_from_unchosen(folder: str) -> bool:
    """Whether `folder` lies in Inductor's own default or a folder the studio set in this
    process: Inductor puts TRITON_CACHE_DIR under its cache folder at its first Triton kernel
    (triton_heuristics), so such a value was no user's choice either."""
    path = os.path.abspath(folder)
    return any(
        path == root or path.startswith(root + os.sep) for root in (inductor_default_cache(), *_studio_set)
    )


def chosen_compile_cache() -> Path | None:
    """The user's TORCHINDUCTOR_CACHE_DIR, or None (unset, empty, Inductor's own default, or a
    folder the studio set in this process)."""
    chosen = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not chosen:
        return None
    folder = os.path.abspath(chosen)
    if folder == inductor_default_cache() or folder in _studio_set:
        return None
    return Path(chosen)
