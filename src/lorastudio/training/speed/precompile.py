"""A cache of Dynamo's own output for the compiled blocks: a later run's first step skips the trace.

With Inductor's and AOTAutograd's caches warm, a compiled FLUX.1 run's first step still spent
~3.6 s in Dynamo on an H100 (RESULTS notes 38-40): bytecode tracing (the fake-tensor run of each
op of the double and the single block graphs), guards, and the backend's cache lookups. Every run
paid it, the second run on the same model and shapes too. torch (2.11+) can save a traced,
guarded and compiled function and load it in another process: `torch.compile(fn,
fullgraph=True).aot_compile((args, kwargs))` gives a `torch._dynamo.aot_compile.
AOTCompiledFunction` holding the graph's bytecode, its guards (serialized), the list of traced
source lines and the backend's output bundled with its backward (AOTAutograd's bundled cache
entry: forward and backward, compiled), which `AOTCompiledFunction.serialize` / `.deserialize`
write and read. (The other levers torch has were read and set aside: `torch.compiler.
save_cache_artifacts` / `load_cache_artifacts` carry Inductor's and AOTAutograd's caches only,
which the studio's cache folder already keeps; Dynamo's `caching_precompile` is process-wide,
experimental, keys a function by its name and first line only and drops every ID / class /
closure guard silently; `set_stance` only chooses between compiling and not.)

What this module adds around it, and why it is safe:
- One file per (key, block class, input signature) under `<Inductor's cache folder>/lorastudio-
  dynamo/<key>/`, written atomically (staging file, then rename). The key hashes what the
  serialized guards cannot check: the Python, torch, diffusers, peft and lorastudio versions,
  the device (and CUDA device name), the compile settings (backend, dynamic, mode), Inductor's,
  AOTAutograd's and Dynamo's configuration, the SDPA kernel flags and the block's structure:
  each submodule's class, its hooks' functions and its attention processor's class (torch drops
  the guards on object identities, ID_MATCH / CLASS_MATCH / CLOSURE_MATCH / FUNCTION_MATCH /
  DICT_VERSION, from a saved function: CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES).
- Guards on globals are kept where torch can serialize them (its default filter for aot_compile
  drops every global guard: `_guard_filter` keeps all but the unserializable types).
- At load, each traced function's source lines (the file's `source_info`: diffusers', peft's,
  torch's, ours) must hash as when it was traced, else the file is traced again and replaced.
- At each call the loaded function's guards are checked (tensor shapes, strides, dtypes,
  requires_grad, the grad mode and autocast state, constants); a call they refuse goes to the
  block's ordinary compiled path (nn.Module.compile), as does every call of a block with its own
  module hooks (the saved function is the block's forward, not its __call__).
- An error reading or checking a saved file traces it again (and replaces the file); an error
  making one (besides running out of memory or a failed write) is logged, recorded beside it as
  `<class>-<signature>.refused` (later runs of that key take the ordinary path at once, no trace
  wasted) and the block class goes to the ordinary path for the rest of the run: never a failed
  run, never a graph traced for other code.
The files are pickles the studio itself wrote, as trusted as Inductor's own cache beside them.

Input signatures are saved in a run's first step only (end_first_step; VARIANTS_PER_CLASS at most).
Not used for compile "wide" (CUDA graphs, static shapes: the wide regions' calls differ), for
blocks holding tensor-subclass weights (int8 / nf4 / fp8: their subclass pickling is not
proven), blocks of classes made at run time (block swap: pickle cannot find them). On by default for a
denoiser on a CUDA GPU (measured at real size on an H100: RESULTS note 49), off on a CPU (whose
runs rarely compile: `LORASTUDIO_PRECOMPILE=1` turns it on there); `LORASTUDIO_PRECOMPILE=0`
turns it off everywhere. The saving run pays aot_compile's trace instead of the ordinary one
and, with Inductor, a compile of its bundled forward and backward (keyed apart from the ordinary
path's cache entries); each later run reads the file instead (RESULTS note 45).
"""

from __future__ import annotations

import importlib
import logging
import os
import time
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from lorastudio.staged_files import TMP, remove_killed_staging, write_staged_bytes, write_staged_text
from lorastudio.training.speed.precompile_key import (
    input_signature,
    local_classes,
    local_instance_functions,
    precompile_key,
)
from lorastudio.training.speed.precompile_prune import FOLDER, OLDER_STAGING, mark_in_use, prune_keys
from lorastudio.training.speed.precompile_torch import (
    SAVED_BACKENDS,
    aot_compilable,
    defaults_source_pickles_its_arguments,
    saved_backends,
    torch_cannot_precompile,
)

log = logging.getLogger(__name__)

ENV = "LORASTUDIO_PRECOMPILE"  # "1": on; "0": off (the ordinary compile only); unset: on for CUDA only
# input signatures traced and saved per block class and run, at most, all in the run's first step
# (end_first_step): FLUX.1's training forward, differential output preservation's no-grad one. A
# later shape (a bucket) takes the ordinary compile, which goes dynamic at its second shape; each
# saved one is a static graph, so saving more would cost a cold run one Inductor compile a shape
VARIANTS_PER_CLASS = 4

# this process's counters, read by first_step_report (summed over runs in one process)
COUNTERS: dict[str, float] = {
    "hit": 0,  # a block class's saved function loaded and checked
    "saved": 0,  # traced with aot_compile and written
    "fallback": 0,  # an error: the class went to the ordinary path
    "guard_miss": 0,  # calls whose inputs the saved functions' guards refused
    "load_s": 0.0,
    "trace_s": 0.0,
}


def precompile_available(device_type: str = "cuda") -> str | None:
    """Why saved Dynamo functions are not used for a denoiser on `device_type` (None when they
    are): LORASTUDIO_PRECOMPILE=0, or unset for a device other than CUDA (the GPU measure, RESULTS
    note 49; on a CPU measured only in RESULTS note 45: =1 turns it on), or this torch cannot save
    them."""
    flag = os.environ.get(ENV, "").strip()
    if flag == "0":
        return f"off ({ENV}=0)"
    if flag != "1" and device_type != "cuda":
        return f"off on {device_type} by default ({ENV}=1 turns it on)"
    return torch_cannot_precompile()


def cache_root() -> Path:
    """The folder of the saved functions: `lorastudio-dynamo` in Inductor's cache folder in use
    (the studio's `<home>/cache/inductor` or the user's TORCHINDUCTOR_CACHE_DIR)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return Path(cache_dir()) / FOLDER


class ClassPrecompile:
    """The saved functions of one block class in one compiled run: loaded or traced at its
    blocks' first calls, one per input signature (up to VARIANTS_PER_CLASS), then chosen per
    call by their guards. `off` (a reason) once an error sent the class to the ordinary path."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.functions: list[Any] = []  # AOTCompiledFunction, in the order they came
        self.tried: set[str] = set()  # input signatures looked up or traced in this run
        self.key: str | None = None  # the key folder's name (from the first block's structure)
        self.off: str | None = None
        self.saving = True  # new signatures are traced and saved until the run's first step ends
        _LIVE.add(self)

    def call(self, block: torch.nn.Module, ordinary: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """`block(*args, **kwargs)` through a saved function whose guards take these inputs, else
        through `ordinary` (the block's nn.Module.compile call); may load or trace one first."""
        if _has_own_hooks(block):
            return ordinary(*args, **kwargs)
        for fn in self.functions:
            if fn.guard_check(block, *args, **kwargs):
                return fn.fn(block, *args, **kwargs)
        if self.off is not None:
            return ordinary(*args, **kwargs)
        signature = input_signature(args, kwargs)
        if signature in self.tried or len(self.tried) >= VARIANTS_PER_CLASS:
            COUNTERS["guard_miss"] += 1
            return ordinary(*args, **kwargs)
        self.tried.add(signature)
        try:
            fn = self._load_or_trace(block, signature, args, kwargs)
        except torch.OutOfMemoryError:
            raise
        except _NotNow as err:  # after the first step, or refused before: this signature is ordinary
            COUNTERS["guard_miss"] += 1
            if str(err):
                log.info("precompile: %s: %s", type(block).__name__, err)
            return ordinary(*args, **kwargs)
        except _NotSavable as err:  # known before any trace: the ordinary compile, no warning
            self.off = str(err)
            log.info("precompile: %s goes to the ordinary compile: %s", type(block).__name__, self.off)
            return ordinary(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - any failure of torch's experimental API: the ordinary compile
            self.off = (
                f"{type(err).__name__}: {str(err).strip().splitlines()[0][:300] if str(err).strip() else ''}"
            )
            COUNTERS["fallback"] += 1
            log.warning("precompile: %s goes to the ordinary compile: %s", type(block).__name__, self.off)
            return ordinary(*args, **kwargs)
        self.functions.append(fn)
        if not fn.guard_check(block, *args, **kwargs):  # its own inputs: never expected
            COUNTERS["guard_miss"] += 1
            return ordinary(*args, **kwargs)
        return fn.fn(block, *args, **kwargs)

    def _load_or_trace(self, block: torch.nn.Module, signature: str, args: tuple, kwargs: dict) -> Any:
        if self.key is None:
            local = local_classes(block)
            if local:  # its guards could not be saved: no trace spent on finding that out
                raise _NotSavable(f"classes pickle cannot find by name: {', '.join(local[:3])}")
            own = local_instance_functions(block)
            if own:  # pickled as other functions: the saved file would not load
                raise _NotSavable(
                    f"functions set on instances that pickle cannot find by name: {', '.join(own[:3])}"
                )
            self.key = precompile_key(block, self.settings)
            try:  # held for this process's life: a prune never removes it (precompile_prune.py)
                mark_in_use(cache_root() / self.key)
            except OSError as err:
                log.warning("precompile: could not mark %s in use: %s", cache_root() / self.key, err)
        path = cache_root() / self.key / f"{type(block).__name__}-{signature[:24]}.bin"
        name = type(block).__name__
        if path.is_file():
            start = time.perf_counter()
            try:
                fn = load_function(path, type(block).forward.__globals__)
            except torch.OutOfMemoryError:
                raise
            except Exception as err:  # noqa: BLE001 - unpickling and torch's checks raise many types: all mean "trace"
                log.warning("precompile: %s: %s unusable, traced again: %s", name, path, err)
            else:
                COUNTERS["hit"] += 1
                COUNTERS["load_s"] += time.perf_counter() - start
                log.info("precompile: %s loaded from %s in %.2f s", name, path, time.perf_counter() - start)
                return fn
        if not self.saving:
            raise _NotNow
        refused = path.with_name(f"{path.stem}.refused")
        if refused.is_file():  # torch refused this before: no trace spent on it again
            why = refused.read_text(encoding="utf-8", errors="replace").strip()[:300]
            raise _NotNow(f"refused in an earlier run ({why}); delete {refused} to try again")
        start = time.perf_counter()
        try:
            fn = trace_function(block, args, kwargs, self.settings)
            save_function(fn, path)
        except (torch.OutOfMemoryError, OSError):  # not torch's refusal: tried again next run
            raise
        except Exception as err:  # noqa: BLE001 - recorded for the next runs of this key, then raised
            _note_refusal(refused, err)
            raise
        COUNTERS["saved"] += 1
        COUNTERS["trace_s"] += time.perf_counter() - start
        log.info("precompile: %s traced and saved to %s in %.2f s", name, path, time.perf_counter() - start)
        try:  # what the next run will do: a file that does not load is no file
            load_function(path, type(block).forward.__globals__)
        except torch.OutOfMemoryError:
            raise
        except Exception as err:  # noqa: BLE001 - unpickling raises many types: recorded, file removed
            path.unlink(missing_ok=True)
            _note_refusal(refused, RuntimeError(f"its saved file did not load: {type(err).__name__}: {err}"))
            COUNTERS["saved"] -= 1
            log.warning("precompile: %s: the saved file did not load, recorded in %s: %s", name, refused, err)
        return fn  # this run uses the traced function either way


def _note_refusal(marker: Path, err: BaseException) -> None:
    """Write why torch refused a block's save to `marker` (atomically), so that later runs of the
    same key take the ordinary compile at once instead of tracing for a save that fails again."""
    text = f"{type(err).__name__}: {str(err).strip()[:2000]}\n"
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        write_staged_text(marker, text)
    except OSError as write_err:
        log.warning("precompile: could not record the refusal in %s: %s", marker, write_err)


class _NotNow(Exception):
    """A signature with no saved file that is not traced now (after the run's first step, or
    refused in an earlier run: the message says which): the ordinary compile."""


_LIVE: weakref.WeakSet[ClassPrecompile] = weakref.WeakSet()  # this process's, for end_first_step


def end_first_step() -> None:
    """Stop tracing and saving new input signatures (call after a run's first step): a later
    shape takes the ordinary compile (which goes dynamic), as it did before this module; files an
    earlier run saved are still loaded."""
    for state in list(_LIVE):
        state.saving = False


class _NotSavable(RuntimeError):
    """A block whose saved function could not be loaded by another process."""


def trace_function(block: torch.nn.Module, args: tuple, kwargs: dict, settings: dict[str, Any]) -> Any:
    """The AOTCompiledFunction of `block.forward` (called as fn(block, *args, **kwargs)) for
    these inputs: fullgraph (a graph break raises), the settings' backend and dynamic."""
    compiled = aot_compilable(
        block.forward,
        backend=settings["backend"],
        dynamic=settings["dynamic"],
        options={"guard_filter_fn": _guard_filter},
    )
    with warnings.catch_warnings(), defaults_source_pickles_its_arguments():
        # torch's guard pickler reads .grad of non-leaf inputs
        warnings.filterwarnings("ignore", message="The .grad attribute of a Tensor that is not a leaf")
        return compiled.aot_compile((args, kwargs))


def _guard_filter(entries: Any) -> list[bool]:
    """Keep every guard torch can serialize, global ones too (aot_compile's own filter drops all
    global guards); the unserializable kinds (object identities) are covered by the key."""
    from torch._dynamo.guards import CheckFunctionManager

    unsupported = set(CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES)
    return [
        not (
            g.guard_type in unsupported
            or unsupported.intersection(getattr(g, "derived_guard_types", None) or ())
        )
        for g in entries
    ]


def save_function(fn: Any, path: Path) -> None:
    """Write `fn` (an AOTCompiledFunction) to `path` atomically: a staging file in its folder,
    then a rename; a concurrent writer's whole file or ours, never a part. The staging file names
    this process (staged_files.staging_path): what a saver killed mid-write left in the folder
    (MBs a graph) is removed first, and an older version's `mkstemp` name a day old (RELIABILITY
    1741: each kill's stayed for ever)."""
    from torch._dynamo.aot_compile import AOTCompiledFunction

    result = AOTCompiledFunction.serialize(fn)
    data = result if isinstance(result, bytes) else result.serialized_data  # 2.11, 2.13: a SaveResult
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_killed_staging(path.parent, TMP, older=OLDER_STAGING)
    write_staged_bytes(path, data)


def load_function(path: Path, f_globals: dict[str, Any]) -> Any:
    """The AOTCompiledFunction saved at `path`, after checking that every source line it traced
    is as it was. Raises RuntimeError (torch's own: another torch, Python or GPU; or a changed
    source), or what reading and unpickling raise."""
    from torch._dynamo.aot_compile import AOTCompiledFunction

    fn = AOTCompiledFunction.deserialize(path.read_bytes(), f_globals)
    changed = changed_sources(fn)
    if changed:
        raise RuntimeError(f"traced source changed since it was saved: {', '.join(changed[:3])}")
    return fn


def changed_sources(fn: Any) -> list[str]:
    """The traced functions (module:first line) of `fn` whose source lines differ from the file's
    record of them (empty when all agree)."""
    from torch._dynamo.package import _hash_sourcelines

    changed = []
    for src in fn.source_info().inlined_sources:
        try:
            module = importlib.import_module(src.module)
            same = _hash_sourcelines(module, src.firstlineno, src.lastlineno) == src.checksum
        except (ImportError, OSError, TypeError):
            same = False
        if not same:
            changed.append(f"{src.module}:{src.firstlineno}")
    return changed


def _has_own_hooks(block: torch.nn.Module) -> bool:
    """Whether calling `block` runs module hooks around its forward (its own or global ones):
    the saved function is the forward alone."""
    from torch.nn.modules import module as nn_module

    return bool(
        block._forward_pre_hooks
        or block._forward_hooks
        or block._backward_hooks
        or block._backward_pre_hooks
        or nn_module._global_forward_pre_hooks
        or nn_module._global_forward_hooks
        or nn_module._global_backward_hooks
        or nn_module._global_backward_pre_hooks
    )


def saved_functions(
    backend: Any, dynamic: bool | None, mode: str | None, regional: bool, device_type: str = "cuda"
) -> dict[str, Any] | None:
    """The per-class saved-function state of one compile_denoiser call (empty; filled as block
    classes are first called), or None where they are not used: a backend not in SAVED_BACKENDS
    (a function has no name to key it by; "eager" returns no savable output), a torch.compile `mode` (CUDA graphs: compile "wide"), regions that are
    not the repeated blocks, `precompile_available()`'s reason or a backend this torch cannot
    save (saved_backends; both logged). `device_type`: where the denoiser's weights are. Prunes
    the saved graphs no run used for KEEP_DAYS days first (training/speed/precompile_prune.py)."""
    if backend not in SAVED_BACKENDS or mode is not None or not regional:
        return None
    why = precompile_available(device_type)
    if why is None and backend not in saved_backends():
        why = f"torch {torch.__version__} cannot save the {backend} backend's output (Inductor's only)"
    if why is not None:
        log.info("precompile: off: %s", why)
        return None
    prune_keys(cache_root())  # keys no run used for KEEP_DAYS days (precompile_prune.py; each logged)
    return {"settings": {"backend": backend, "dynamic": dynamic}, "classes": {}}


def through_saved(
    block: torch.nn.Module, ordinary: Callable[..., Any], saved: dict[str, Any] | None
) -> Callable[..., Any]:
    """`ordinary` (the block's compiled call), or a call that goes through the saved functions of
    its class first (ClassPrecompile.call) when `saved` is not None."""
    if saved is None:
        return ordinary
    classes: dict[type, ClassPrecompile] = saved["classes"]
    state = classes.setdefault(type(block), ClassPrecompile(saved["settings"]))

    def call(*args: Any, **kwargs: Any) -> Any:
        return state.call(block, ordinary, args, kwargs)

    return call
