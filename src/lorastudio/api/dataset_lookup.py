"""The one lookup of the dataset a /api/datasets/{name}/... route acts on.

`dataset_path` turns a name into its folder (existence unchecked: an upload creates it);
`existing_dataset` / the `dataset_dep` dependency also require the folder (`listed_dataset_dep`
as listed, for a delete or a rename: hand-named folders and links too), answering a missing
dataset as DatasetNotFound (404, `{"error": "DatasetNotFound", "detail": "no dataset named
'x'", "dataset": "x"}`) on every route alike. Before, each route looked for itself: a bulk
caption edit answered 400 DatasetError (the scanner's "dataset folder not found"), a caption
edit or a thumbnail 404 "no image ..." as if only the file were missing.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import Depends

from lorastudio.api.deps import settings_dep
from lorastudio.data import resolve_dataset_dir, safe_component
from lorastudio.data.dataset_names import hand_named_folder, unusable_error
from lorastudio.errors import ConfigError, DatasetNotFound, PathOutsideRoot
from lorastudio.settings import Settings


def dataset_path(settings: Settings, name: str) -> Path:
    """The dataset folder `name` (one safe component) inside the datasets root. A folder listed
    under a name the studio cannot use (data/dataset_names.py) is refused (400) with the reason
    and the fix (rename it), never looked up under another name. Existence is not checked."""
    try:
        safe_component(name, field="dataset name")
    except (ConfigError, PathOutsideRoot):
        if (err := unusable_error(settings.datasets_dir, name)) is not None:
            raise err from None
        raise
    if (err := unusable_error(settings.datasets_dir, name)) is not None:  # NFD
        raise err
    return resolve_dataset_dir(name, settings.datasets_dir, allow_outside_root=False)


def existing_dataset(settings: Settings, name: str) -> Path:
    """The folder of dataset `name` (see `dataset_path`). Raises DatasetNotFound when there is
    no such folder (nothing there, or a file)."""
    folder = dataset_path(settings, name)
    if not folder.is_dir():
        raise DatasetNotFound(name)
    return folder


def listed_dataset(settings: Settings, name: str) -> Path:
    """The dataset `name` as listed, for a delete or a rename: a folder made by hand under a
    name the studio cannot use included (data/dataset_names.py), a link not followed. Raises
    DatasetNotFound when there is no folder (or link) of that name."""
    root = settings.datasets_dir
    if (hand_named := hand_named_folder(root, name)) is not None:
        return hand_named
    folder = root / safe_component(name, field="dataset name")
    if not (folder.is_symlink() or folder.is_dir()):
        _busy_if_being_made(settings, folder)
        raise DatasetNotFound(name)
    return folder


def _busy_if_being_made(settings: Settings, folder: Path) -> None:
    """A dataset not there yet may be being made under its name (a kohya import commits into
    its folder's claim before the folder is listed): a delete or rename of it is then the
    claim's 409 naming that holder, not a 404. Takes and drops a brief write claim."""
    from lorastudio.jobs.dataset_claims import WRITE, DatasetClaim

    holder = f"an edit of dataset {folder.name!r} through the lorastudio server"
    with DatasetClaim.take(settings.home, settings.datasets_dir, [folder], WRITE, holder, brief=True):
        pass


def listed_dataset_dep(name: str, settings: Settings = Depends(settings_dep)) -> Path:
    """FastAPI dependency: `listed_dataset` of the route's `{name}` (a delete, a rename)."""
    return listed_dataset(settings, name)


def dataset_dep(name: str, settings: Settings = Depends(settings_dep)) -> Path:
    """FastAPI dependency of a route with a `{name}` path parameter: the existing dataset's
    folder (resolved before the body is validated: a missing dataset is 404 whatever the body)."""
    return existing_dataset(settings, name)
