"""The folders a user added to the catalogue (kept in `<home>/added_models.json`, a JSON object
{"folders": [absolute paths]}). lorastudio never writes into or deletes an added folder; forgetting
one only removes it from this list. Writes are atomic (temp file + rename) and serialised, across
threads and processes (a CLI `models add` beside the server's Models page): each read-modify-write
holds an flock on `<home>/.added_models.lock`, which the kernel drops when its holder dies.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lorastudio.basemodels.jsonfile import read_json
from lorastudio.basemodels.single_file import is_single_file
from lorastudio.errors import ConfigError, FieldProblem, NotFound, writing
from lorastudio.file_modes import follow_umask_fd
from lorastudio.settings import Settings
from lorastudio.staged_files import staging_path
from lorastudio.user_paths import expand_user, is_dir, resolved

ADDED_FILE = "added_models.json"
LOCK_FILE = ".added_models.lock"
_lock = threading.Lock()


@contextmanager
def _list_held(settings: Settings) -> Iterator[None]:
    """Hold the added list for a read-modify-write: this process's threads one at a time, and
    other processes of the home (an flock on LOCK_FILE, kept; nothing else is in it). Without the
    flock, a CLI `models add` and the server's add at once each wrote the list it read: one lost."""
    path = settings.home / LOCK_FILE
    with _lock:
        with writing("the lock of the list of added model folders could not be made", path):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        try:
            follow_umask_fd(fd)  # an older version's 0600 lock (file_modes.py)
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def added_list_path(settings: Settings) -> Path:
    return settings.home / ADDED_FILE


def added_id(folder: Path) -> str:
    """The catalogue id of an added folder: 'added:<name>-<8 hex of the path>' (stable, URL-safe)."""
    digest = hashlib.sha1(str(folder).encode()).hexdigest()[:8]
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in folder.name) or "folder"
    return f"added:{safe}-{digest}"


def added_folders(settings: Settings) -> list[Path]:
    """The added folders, in the order they were added. A missing or unreadable list is empty."""
    try:
        data = read_json(added_list_path(settings))
    except (OSError, ValueError):
        return []
    folders = data.get("folders") if isinstance(data, dict) else None
    return [Path(p) for p in folders if isinstance(p, str)] if isinstance(folders, list) else []


def _write(settings: Settings, folders: list[Path]) -> None:
    target = added_list_path(settings)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = staging_path(target)  # staged_files.py: a killed writer's is removed at a server start
    try:
        with writing("the list of added model folders could not be written", target):
            tmp.write_text(
                json.dumps({"folders": [str(f) for f in folders]}, indent=2) + "\n", encoding="utf-8"
            )
            os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


# Folders that are never a model: the file system's and the system's roots (their contents are
# walked by every catalogue listing), and what lies under the kernel's pseudo file systems.
SYSTEM_FOLDERS = frozenset(
    Path(p)
    for p in (
        "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/media", "/mnt",
        "/opt", "/proc", "/root", "/run", "/sbin", "/snap", "/srv", "/sys", "/tmp", "/usr", "/usr/bin",
        "/usr/lib", "/usr/local", "/usr/share", "/var", "/var/lib", "/var/tmp",
    )
)  # fmt: skip
PSEUDO_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))


def refusal(folder: Path, settings: Settings) -> str | None:
    """Why the resolved `folder` cannot be added as a model folder, or None: a system folder,
    a folder under /proc, /sys or /dev, the user's home folder, the studio home, a folder that
    contains it or lies inside it (models/ is listed already)."""
    home = settings.home.expanduser().resolve()
    models = settings.models_dir.expanduser().resolve()
    if folder == models or folder.is_relative_to(models):
        return f"{folder} is under {models}, which is listed already"
    if folder in SYSTEM_FOLDERS or any(folder.is_relative_to(root) for root in PSEUDO_ROOTS):
        return f"{folder} is a system folder, not a model folder; add the folder of one model"
    if home.is_relative_to(folder):
        return f"{folder} holds the studio home ({home}); add the folder of one model"
    if folder.is_relative_to(home):
        return f"{folder} is inside the studio home ({home}), whose folders lorastudio manages"
    if folder == expand_user("~").resolve():  # "~" as typed where the user has no home (a container's uid)
        return f"{folder} is your home folder, not a model folder; add the folder of one model"
    return None


def add_folder(settings: Settings, path: str) -> Path:
    """Add an existing folder or single-file checkpoint (absolute path) to the catalogue;
    returns its resolved path.
    Idempotent. Raises ConfigError for a relative path, a path that is not a folder, or a folder
    that is no model's (see `refusal`: a system folder, the studio home or one around or in it,
    models/ which is listed already)."""
    given = expand_user(path)
    if not given.is_absolute():
        raise ConfigError([FieldProblem("path", f"{path!r}: give an absolute folder path")])
    folder = resolved(given)
    if folder is None:  # a NUL byte, a link that loops
        raise ConfigError(
            [FieldProblem("path", f"{path!r} cannot be resolved to a folder or checkpoint file")]
        )
    if not is_dir(folder) and not is_single_file(folder):
        raise ConfigError([FieldProblem("path", f"{folder} is not an existing folder or checkpoint file")])
    why = refusal(folder, settings)
    if why is not None:
        raise ConfigError([FieldProblem("path", why)])
    with _list_held(settings):
        folders = added_folders(settings)
        if folder not in folders:
            _write(settings, [*folders, folder])
    return folder


def forget_folder(settings: Settings, model_id: str) -> Path:
    """Remove the added folder with catalogue id `model_id` from the list (its files are left
    alone); returns its path. Raises NotFound when no added folder has that id."""
    with _list_held(settings):
        folders = added_folders(settings)
        match = next((f for f in folders if added_id(f) == model_id), None)
        if match is None:
            raise NotFound(f"no added folder with id {model_id!r}")
        _write(settings, [f for f in folders if f != match])
    return match
