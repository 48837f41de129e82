"""What the saved block graphs (training/speed/precompile.py) need of torch that differs between its
versions: torch 2.11 (the GPU host's) and 2.13 (this host's, CI's) both have
`torch._dynamo.aot_compile` (`aot_compile_fullgraph`, `AOTCompiledFunction.serialize` /
`deserialize`), but 2.11 attaches the `aot_compile` method to a compiled function only when asked
(`aot_compilable`), cannot bundle the aot_eager backend's output (`saved_backends`) and pickles
a guard on a default argument so that its own loader refuses it
(`defaults_source_pickles_its_arguments`). Each is found by looking at torch's objects, not its
version number, and changes nothing where torch already behaves (RELIABILITY 1148-1150)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch

# the backends whose output aot_compile can save (AOTAutograd's bundled entry); "aot_eager" only
# where this torch can bundle it (saved_backends: 2.13, not 2.11; 2.12 not read)
SAVED_BACKENDS = ("inductor", "aot_eager")


def saved_backends() -> tuple[str, ...]:
    """The SAVED_BACKENDS this torch can save: "aot_eager" only where its output is an OutputCode
    that AOTAutograd's bundled cache entry takes (`AOTEagerOutputCode`: torch 2.13, not 2.11). torch
    2.11's aot_eager returns a plain function, and its bundling raises "AssertionError: expected
    OutputCode, got <class 'function'>" after the whole trace (autograd_cache.py): refused here,
    before any trace."""
    from torch._dynamo.backends import debugging

    if hasattr(debugging, "AOTEagerOutputCode"):
        return SAVED_BACKENDS
    return tuple(b for b in SAVED_BACKENDS if b != "aot_eager")


def aot_compilable(fn: Callable[..., Any], **kwargs: Any) -> Any:
    """`torch.compile(fn, fullgraph=True, **kwargs)` with its `aot_compile` method: torch attaches
    it to the wrapper it returns only while `torch._dynamo.config.enable_aot_compile` is on, which
    is on by default in 2.13 and off in 2.11 (whose wrapper then lacks the method: RESULTS note
    45's GPU run). The flag is read once, when the wrapper is made (2.11's and 2.13's eval_frame:
    `_TorchDynamoContext.__call__`); what the method calls, `aot_compile_fullgraph`, is the same
    entry point in both, and the flag changes nothing else on the ordinary path."""
    with torch._dynamo.config.patch(enable_aot_compile=True):
        return torch.compile(fn, fullgraph=True, **kwargs)


@contextlib.contextmanager
def defaults_source_pickles_its_arguments() -> Iterator[None]:
    """While a trace pickles its guards: a `DefaultsSource` (the source of a guard on a function's
    default argument, which every diffusers block's forward has) pickled as its constructor's
    arguments only. torch 2.11's `_guards.dataclass_with_cached_hash.__reduce__` writes every
    dataclass field, DefaultsSource's two computed ones (`field`, `_name`: init=False) too, and its
    loader passes them all to the constructor: "DefaultsSource.__init__() takes from 3 to 4
    positional arguments but 6 were given", so no saved FLUX.1 block loaded (the tiny FLUX.1 on
    torch 2.11, RELIABILITY 1150). torch 2.13 writes the init fields only: where this torch does,
    nothing is changed. The files written either way load on both (the constructor recomputes
    the two fields)."""
    from torch._dynamo.source import DefaultsSource, LocalSource

    names = tuple(f.name for f in dataclasses.fields(DefaultsSource) if f.init)
    try:
        written = DefaultsSource(LocalSource("fn"), 0).__reduce__()
    except (TypeError, ValueError, AttributeError):  # another constructor: torch's own reduce
        written = None
    if not isinstance(written, tuple) or len(written) != 2 or len(written[1]) == len(names):
        yield
        return

    def reduce(self: Any) -> tuple[type, tuple]:
        return (type(self), tuple(getattr(self, name) for name in names))

    had = DefaultsSource.__dict__.get("__reduce__")
    DefaultsSource.__reduce__ = reduce  # type: ignore[method-assign]
    try:
        yield
    finally:
        if had is None:
            del DefaultsSource.__reduce__
        else:
            DefaultsSource.__reduce__ = had  # type: ignore[method-assign]


def torch_cannot_precompile() -> str | None:
    """Why this torch cannot save and load a compiled block's Dynamo output (None when it can)."""
    if not hasattr(aot_compilable(_identity), "aot_compile"):  # no trace: nothing is called
        return f"torch {torch.__version__}'s compiled functions have no aot_compile"
    try:
        from torch._dynamo.aot_compile import AOTCompiledFunction  # noqa: F401
        from torch._dynamo.guards import CheckFunctionManager
        from torch._dynamo.package import _hash_sourcelines  # noqa: F401
    except ImportError as err:
        return f"torch {torch.__version__} has no aot_compile ({err})"
    if not hasattr(CheckFunctionManager, "UNSUPPORTED_SERIALIZATION_GUARD_TYPES"):
        return f"torch {torch.__version__} does not list its unserializable guards"
    import torch._inductor.config as inductor_config

    if inductor_config.force_disable_caches:
        return "Inductor's caches are disabled (TORCHINDUCTOR_FORCE_DISABLE_CACHES)"
    return None


def _identity(x: Any) -> Any:
    return x
