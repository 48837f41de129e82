"""Dataset folders made by hand under a name the studio would not create (no torch, no HTTP).

Dataset names are the identity of claims and locks, so every route, a run's data_dir and the
CLI look a dataset up by the creation rules (paths.safe_component) in NFC. A folder copied in
under another name (holding `?` or `"`, over 100 characters, `CON`, or in NFD as copied from
macOS) is still listed, marked unusable with the reason and the fix (`name_problem`), and
`rename_dataset` gives it a good name: the folder is renamed in one step, refused while a job or
a claim holds it and when the new name is taken.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

from lorastudio.data.decoded_files import move_record
from lorastudio.data.paths import existing_component, new_name, safe_component
from lorastudio.data.safe_open import folder_identity
from lorastudio.data.writes import dataset_lock
from lorastudio.errors import (
    ConfigError,
    DatasetError,
    DatasetNotFound,
    FieldProblem,
    JobActive,
    PathOutsideRoot,
    writing,
)

log = logging.getLogger("lorastudio.jobs")

RENAME_FIX = "rename the folder"


def _reason(err: ConfigError | PathOutsideRoot) -> str:
    if isinstance(err, ConfigError):
        return "; ".join(p.message for p in err.problems)
    return str(err)


def name_problem(root: Path, name: str) -> str | None:
    """Why the folder `name` directly under the datasets `root` cannot be used by the name it is
    listed under, ending in the fix ("...: rename the folder"); None when it can. A name in NFD
    is usable where the file system finds it by its NFC form too (the same folder: macOS)."""
    try:
        safe = safe_component(name, field="folder name")
    except (ConfigError, PathOutsideRoot) as err:
        return f"the studio cannot use this name ({_reason(err)}): {RENAME_FIX}"
    if safe == name:
        return None
    nfc_path = root / safe
    if os.path.lexists(nfc_path):
        try:
            if os.path.samefile(root / name, nfc_path):
                return None  # a normalisation-insensitive file system: one folder
        except OSError:
            pass
        return (
            f"its name is in decomposed Unicode (NFD, as copied from macOS) and another folder "
            f"{safe!r} has the same name in NFC: {RENAME_FIX}"
        )
    return (
        "its name is in decomposed Unicode (NFD, as copied from macOS), so the studio cannot "
        f"tell it from {safe!r}: {RENAME_FIX} (to {safe!r} keeps the name as it reads)"
    )


def hand_named_folder(root: Path, name: str) -> Path | None:
    """The folder `name` (as listed) directly under `root` when it is a real folder (not a link,
    not hidden) that `name_problem` refuses; else None. Never a path outside `root`."""
    try:
        existing_component(name)
    except (ConfigError, PathOutsideRoot):
        return None
    folder = root / name
    if name.startswith(".") or folder.is_symlink() or not folder.is_dir():
        return None
    return folder if name_problem(root, name) is not None else None


def unusable_error(root: Path, name: str, field: str = "dataset name") -> ConfigError | None:
    """A ConfigError naming the problem and the fix when `name` is a listed folder the studio
    cannot use (`hand_named_folder`), for a lookup that refused it; None otherwise."""
    if hand_named_folder(root, name) is None:
        return None
    problem = name_problem(root, name)
    return ConfigError(
        [
            FieldProblem(
                field,
                f"dataset folder {name!r}: {problem} (the web's Rename, POST "
                "/api/datasets/<name>/rename, or `lorastudio datasets rename`)",
            )
        ]
    )


def rename_dataset(
    root: Path,
    name: str,
    to: str,
    in_use: Callable[[], set[Path]],
    field: str = "to",
    decoded_dir: Path | None = None,
) -> str:
    """Rename the dataset folder `name` (as listed: any name a folder directly under `root` can
    have, hand-made ones included) to `to` (a new dataset name: paths.new_name, NFC); the new
    name's problems are named `field` (the API's body key `to`; the CLI its argument `TO`).

    Returns the new name. The rename is one os.rename under the new name's lock (and the old
    one's, when it is a name the studio uses: uploads and edits take it), after checking
    that no entry has that name (an empty folder of that name is not replaced). `decoded_dir`:
    the studio's decoded-images records (settings.decoded_record_dir): the folder's record and
    its journal are carried over to the new name (data/decoded_files.move_record; before, the
    renamed dataset's every image was decoded again: RELIABILITY 2212); None: none kept.
    Raises: ConfigError / PathOutsideRoot for a bad name or a new name that is taken or the
    same; NotFound when there is no such folder (links are not renamed); JobActive when a
    queued or running job trains on it (callers also hold its write claim: a caption job or a
    CLI run holding it refuses the rename, DatasetBusy).
    """
    name = existing_component(name, field="dataset name")
    target = new_name(to, field=field)
    folder = root / name
    if name.startswith(".") or folder.is_symlink() or not folder.is_dir():
        raise DatasetNotFound(name)
    if target == name:
        raise ConfigError([FieldProblem(field, f"the dataset is already named {target!r}")])
    locked = sorted({target} if name_problem(root, name) is not None else {target, name})
    with contextlib.ExitStack() as stack:  # a usable source's lock too, both in one order
        for key in locked:
            stack.enter_context(dataset_lock(root, key))
        dest = root / target
        if os.path.lexists(dest) and not _same(folder, dest):
            raise ConfigError([FieldProblem(field, f"a dataset named {target!r} already exists")])
        if folder.resolve() in in_use():
            raise JobActive(
                f"dataset {name!r} is used by a queued or running training job; rename it when the job ends"
            )
        with writing(f"the dataset {name} could not be renamed", folder):  # a mount point: EBUSY
            os.rename(folder, dest)
        if decoded_dir is not None:
            _carry_record(decoded_dir, folder, dest)
    return target


def _carry_record(decoded_dir: Path, old: Path, new: Path) -> None:
    """Move the decoded-images record of the folder renamed from `old` to `new`; a failure is
    logged (the rename is done; the record is a cache: its images are decoded again)."""
    try:
        move_record(decoded_dir, old, new, folder_identity(new))
    except (OSError, DatasetError) as err:
        log.warning("dataset %s renamed; its decoded-images record was not carried over: %s", new.name, err)


def _same(a: Path, b: Path) -> bool:
    """Whether `a` and `b` are one folder (a name and its NFC form on macOS, or a case change on
    a case-insensitive file system)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
