"""Deleting a whole dataset folder (no torch, no HTTP), for the API and the CLI.

The folder is renamed to a hidden `<datasets root>/.deleting-<hex>` under the dataset's lock
(one atomic step: listings, uploads and new jobs no longer see it), then removed. A removal cut
short by a crash leaves only that hidden folder, the naming the start-up cleanup of run deletes
uses (jobs/leftovers.py `_RUN_DELETE`).
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from lorastudio.data.dataset_names import hand_named_folder
from lorastudio.data.decoded_files import forget_record
from lorastudio.data.paths import safe_component
from lorastudio.data.safe_open import FolderId, folder_identity
from lorastudio.data.writes import dataset_lock
from lorastudio.errors import DatasetError, DatasetNotFound, JobActive, os_error_text, writing

TRASH_PREFIX = ".deleting-"
log = logging.getLogger(__name__)


def delete_dataset(
    datasets_root: Path, name: str, in_use: Callable[[], set[Path]], decoded_dir: Path | None = None
) -> str | None:
    """Delete dataset `name` (one safe component) directly under `datasets_root`.

    Args:
        datasets_root: the studio's datasets folder.
        name: the dataset's name.
        in_use: returns the (resolved) dataset folders that a queued or running job trains on;
            called under the dataset's lock, just before the folder is moved aside.
        decoded_dir: the studio's record of decoded images (settings.decoded_record_dir): the
            folder's record there is removed with it (data/decoded_files.forget_record).
    Raises:
        ConfigError / PathOutsideRoot: a bad name.
        NotFound: no dataset folder of that name.
        JobActive: a queued or running job uses the dataset (nothing is changed).
        WriteFailed / NoSpaceLeft: the folder could not be moved aside (nothing is changed).
    Returns None, or where the folder, once moved aside (the dataset deleted), kept files its
    removal could not remove (logged too; the next server start tries again: jobs/leftovers.py).
    A symbolic link of that name is only unlinked (its target is never touched). A folder made
    by hand under a name the studio cannot use (listed `usable: false`) is deleted by its listed
    name too.
    """
    if (hand_named := hand_named_folder(datasets_root, name)) is not None:
        # a folder made by hand under a name the studio cannot use (data/dataset_names.py): no
        # upload or job reaches it by that name, so it has no lock of its own to take
        if hand_named.resolve() in in_use():
            raise JobActive(f"dataset {name!r} is used by a queued or running training job")
        identity = _identity(hand_named)
        with writing(f"the dataset {name} could not be deleted", hand_named):
            trash = _trash(datasets_root, hand_named)
        left = _remove(trash, name)
        _forget(decoded_dir, hand_named, identity)
        return left
    name = safe_component(name, field="dataset name")
    folder = datasets_root / name
    with dataset_lock(datasets_root, name):
        if not os.path.lexists(folder) or not (folder.is_symlink() or folder.is_dir()):
            raise DatasetNotFound(name)
        if folder.resolve() in in_use():
            raise JobActive(
                f"dataset {name!r} is used by a queued or running training job; delete it when the job ends"
            )
        with writing(f"the dataset {name} could not be deleted", folder):
            if folder.is_symlink():
                folder.unlink()
                return None
            identity = _identity(folder)
            trash = _trash(datasets_root, folder)
    left = _remove(trash, name)
    _forget(decoded_dir, folder, identity)
    return left


def _identity(folder: Path) -> FolderId | None:
    """The folder's (device, inode), None when it cannot be read (then no record is removed)."""
    try:
        return folder_identity(folder)
    except DatasetError:
        return None


def _forget(decoded_dir: Path | None, folder: Path, identity: FolderId | None) -> None:
    if decoded_dir is not None and identity is not None:
        forget_record(decoded_dir, folder, identity)


def _remove(trash: Path, name: str) -> str | None:
    """Remove the moved-aside folder. The dataset is deleted once it is moved aside (gone from
    listings, its record forgotten), so a failed removal (a read-only or immutable file inside)
    does not undo that: it is logged and returned as a note naming the folder left, which the
    next server start tries again (a kill -9 here leaves the same)."""
    try:
        shutil.rmtree(trash)
    except OSError as err:
        left = (
            f"some of its files could not be removed ({os_error_text(err)}): they are in {trash}, "
            "which the next server start removes again (or remove it by hand)"
        )
        log.warning("dataset %s deleted, but %s", name, left)
        return left
    return None


def _trash(datasets_root: Path, folder: Path) -> Path:
    """Rename `folder` to a hidden trash name (gone from listings at once); returns that path."""
    trash = datasets_root / f"{TRASH_PREFIX}{uuid.uuid4().hex}"
    os.rename(folder, trash)
    return trash
