"""Keep the garbage collector off the imported libraries in a training or generation process.

A worker imports torch, diffusers, transformers, peft and torchao (~450,000 objects on the CPU
host, more once Inductor is in): every full collection walks them all again. The engine collects
after dropping a model (`training/precision.free_accelerator_memory`: after the caption encoding,
the latent cache, each sample round, a memory plan's trials) and Python's own generation-2 passes
run during the steps; each full pass took ~0.16 s on the dev host with nothing of a run loaded.
`gc.freeze()` after the imports moves those objects to the permanent generation, which no
collection scans (measured: 0.16 s -> microseconds a pass). Frozen objects are still freed by
reference counting; only a cycle among them is never collected, which is why this runs once,
right after a process's imports, before any model exists, and only in processes that exist to
train or generate (never in the server or a test runner, whose objects come and go). The CLI's
`train` freezes only when the command runs as the console program (`cli/app.main` marks the process
standalone): a test runner calls the same command in its own process.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

_standalone = False  # set by the console entry point (cli/app.main): this process runs one command


def freeze_imports(collect_first: bool = False) -> int:
    """Move every object tracked now to the permanent generation (see the module docstring);
    `collect_first` collects the garbage of the imports first (where time is free: a standby
    worker before it says ready). Returns the number of objects frozen in all."""
    if collect_first:
        gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def mark_standalone() -> None:
    """Record that this process is the `lorastudio` console program (it runs one command, then
    exits): called by cli/app.main, it counts only where the process's main module is that
    program (the `lorastudio` script, `python -m lorastudio` or `python -m lorastudio.cli`),
    never where main() is called inside another program (a test runner)."""
    global _standalone
    _standalone = _is_console_program()


def _is_console_program() -> bool:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None:
        return spec.name in ("lorastudio", "lorastudio.__main__", "lorastudio.cli", "lorastudio.cli.__main__")
    return Path(getattr(main, "__file__", None) or "").name == "lorastudio"


def is_standalone() -> bool:
    """Whether this process is the console program (mark_standalone)."""
    return _standalone


def freeze_if_standalone() -> int | None:
    """freeze_imports() in the console program (mark_standalone); None, nothing frozen, elsewhere."""
    return freeze_imports() if _standalone else None
