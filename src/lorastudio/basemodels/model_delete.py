"""Deleting a base model from the catalogue (basemodels/catalogue.py): only what lorastudio
downloaded or created (a fetch or tiny marker, directly under models/, not a link), never a
folder in use, decided and moved aside under the locks new users of a model take. No torch.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from lorastudio.basemodels.catalogue import FETCH_MARKER, ModelEntry, get_model
from lorastudio.errors import JobActive, ModelNotDeletable, NotFound, writing
from lorastudio.settings import Settings
from lorastudio.tiny import MARKER_FILE as TINY_MARKER

_delete_lock = threading.Lock()


def delete_model(
    settings: Settings,
    model_id: str,
    *,
    in_use: Collection[Path] | Callable[[], Collection[Path]] = (),
    hold: AbstractContextManager[Any] | None = None,
) -> ModelEntry:
    """Delete a base model lorastudio downloaded or created (fetched or tiny, under models/).

    `in_use`: folders that a queued or running job or a running fetch uses (a callable: asked
    under `hold`, the locks new users of a model take: JobService.enqueues_held, the generation
    service's bases_held; the check and the move aside happen under it, the removal after). Returns the deleted
    entry. Raises NotFound, ModelNotDeletable (added folders, the hub cache, the user's own
    folders) and JobActive (in use). The folder is first renamed to a hidden sibling, so it
    leaves the catalogue at once even if removing its files is slow or fails half-way.
    """
    # a second delete of it lists it as gone, not half-renamed (a 403 or a 500)
    with hold or contextlib.nullcontext(), _delete_lock:
        entry = get_model(settings, model_id)
        if not entry.deletable:
            raise ModelNotDeletable(_why_not_deletable(entry))
        folder = Path(entry.path)
        busy = {Path(p).resolve() for p in (in_use() if callable(in_use) else in_use)}
        if folder.resolve() in busy:
            raise JobActive(
                f"{model_id!r} is in use by a queued or running job, a generation or a fetch; try again when it ends"
            )
        trash = folder.with_name(f".{folder.name}.deleting-{uuid.uuid4().hex[:8]}")
        try:
            with writing(f"the model {model_id} could not be deleted", folder):  # a mount point: EBUSY
                os.rename(folder, trash)
        except FileNotFoundError:  # another process (`models rm`, another server) deleted it
            raise NotFound(f"no model with id {model_id!r}: it was deleted meanwhile") from None
    shutil.rmtree(trash)  # outside the lock: a large model's removal holds no other delete
    return entry


def _why_not_deletable(entry: ModelEntry) -> str:
    if entry.source == "catalogue":
        return f"{entry.name} is not on disk (not fetched): nothing to delete"
    if entry.source == "hub-cache":
        return (
            f"{entry.name} is in the Hugging Face hub cache ({entry.path}), shared with other tools; "
            "lorastudio never deletes it (use `hf cache delete`)"
        )
    if entry.source == "added":
        return (
            f"{entry.path} is a folder you added; lorastudio never deletes it. Remove it from the list "
            f"with DELETE /api/models/added/{entry.id} or `lorastudio models forget {entry.id}`"
        )
    return (
        f"{entry.path} was not downloaded or created by lorastudio (no {FETCH_MARKER} or {TINY_MARKER}); "
        "remove it yourself"
    )
