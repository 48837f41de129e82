"""A pipeline load that a cancel stops between two components.

diffusers' `from_pretrained` / `from_single_file` load a pipeline's components one by one (text
encoders, tokenizers, VAE, denoiser, scheduler) through one module-level function each
(`pipeline_utils.load_sub_model`, `single_file.load_single_file_sub_model`) and offer no hook
to stop between them. Inside `cancellable_load(cancelled)` those functions ask `cancelled()`
before each component and raise GenerationCancelled when it is True: the load stops at the
next component boundary and what it had loaded is dropped with the frames that held it (the
caller frees the memory: generation_worker.Resident.drop).

The wrappers are installed on first use and stay (idempotent; a function replaced since, e.g.
by a test's slow loader, is wrapped in turn); outside a `cancellable_load` (or in another
thread, the callable is a ContextVar) they only call through. A diffusers without those names
loads without the stops (`missing_hooks` names them; a test checks that there are none).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from lorastudio.errors import GenerationCancelled

# (module, function) of diffusers that loads one pipeline component, called with name=<component>
COMPONENT_LOADERS = (
    ("diffusers.pipelines.pipeline_utils", "load_sub_model"),
    ("diffusers.loaders.single_file", "load_single_file_sub_model"),
)
_CANCELLED: ContextVar[Callable[[], bool] | None] = ContextVar("lorastudio_load_cancelled", default=None)


def stop_if_cancelled(before: str) -> None:
    """Raise GenerationCancelled when the current `cancellable_load`'s `cancelled()` is True;
    `before`: what the load was about to do (for the message)."""
    cancelled = _CANCELLED.get()
    if cancelled is not None and cancelled():
        raise GenerationCancelled(f"generation cancelled while its pipeline loaded, before {before}")


def _checked(load: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(load)
    def load_component(*args: Any, **kwargs: Any) -> Any:
        stop_if_cancelled(f"its {kwargs.get('name', 'next component')}")
        return load(*args, **kwargs)

    load_component.lorastudio_checked = True  # type: ignore[attr-defined]
    return load_component


def missing_hooks() -> list[str]:
    """The component loaders of COMPONENT_LOADERS this diffusers lacks ("module.name")."""
    missing = []
    for module_name, name in COMPONENT_LOADERS:
        module = importlib.import_module(module_name)
        if not callable(getattr(module, name, None)):
            missing.append(f"{module_name}.{name}")
    return missing


def _install() -> None:
    for module_name, name in COMPONENT_LOADERS:
        module = importlib.import_module(module_name)
        load = getattr(module, name, None)
        if callable(load) and not getattr(load, "lorastudio_checked", False):
            setattr(module, name, _checked(load))


@contextlib.contextmanager
def cancellable_load(cancelled: Callable[[], bool] | None) -> Iterator[None]:
    """Within it, a diffusers pipeline load raises GenerationCancelled before its next component
    once `cancelled()` is True (None: nothing is asked)."""
    if cancelled is None:
        yield
        return
    _install()
    token = _CANCELLED.set(cancelled)
    try:
        yield
    finally:
        _CANCELLED.reset(token)
