"""Loading one pipeline component with errors that name it, and quiet library loaders."""

from __future__ import annotations

from typing import Any

from lorastudio.errors import ModelSourceError
from lorastudio.hub_token import hub_kwargs
from lorastudio.open_reason import library_open_reason


def load_component(cls: Any, source: str, subfolder: str, revision: str | None, **kwargs: Any) -> Any:
    """`cls.from_pretrained(source, subfolder=..., revision=..., **kwargs)`, handed the
    process's hub token (hub_token.hub_kwargs), with a clear ModelSourceError naming the
    component when it is missing or unreadable (a file transformers' safetensors open failed to
    open: the system's reason, not safetensors' "No such file or directory": RELIABILITY 1283)."""
    quiet_loading()
    try:
        return cls.from_pretrained(source, subfolder=subfolder, revision=revision, **hub_kwargs(), **kwargs)
    except (OSError, ValueError, KeyError) as err:
        raise ModelSourceError(
            f"cannot load {subfolder!r} ({cls.__name__}) from {source!r}: {library_open_reason(err)}"
        ) from err


def quiet_loading() -> None:
    """Silence diffusers'/transformers' loading progress bars (the engine reports progress)."""
    import diffusers.utils.logging as dlog
    import transformers.utils.logging as tlog

    dlog.disable_progress_bar()
    tlog.disable_progress_bar()
