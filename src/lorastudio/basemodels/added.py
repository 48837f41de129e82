"""The folders a user added to the catalogue (kept in `<home>/added_models.json`, a JSON object
{"folders": [absolute paths]}). lorastudio never writes into or deletes an added folder; forgetting
one only removes it from this list. Writes are atomic (temp file + rename) and serialised.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

from lorastudio.errors import ConfigError, FieldProblem, NotFound
from lorastudio.settings import Settings

ADDED_FILE = "added_models.json"
_lock = threading.Lock()


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
        data = json.loads(added_list_path(settings).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    folders = data.get("folders") if isinstance(data, dict) else None
    return [Path(p) for p in folders if isinstance(p, str)] if isinstance(folders, list) else []


def _write(settings: Settings, folders: list[Path]) -> None:
    target = added_list_path(settings)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps({"folders": [str(f) for f in folders]}, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def add_folder(settings: Settings, path: str) -> Path:
    """Add an existing folder (absolute path) to the catalogue; returns its resolved path.
    Idempotent. Raises ConfigError for a relative path, a path that is not a folder, or a folder
    under the studio's models/ (listed already)."""
    given = Path(path).expanduser()
    if not given.is_absolute():
        raise ConfigError([FieldProblem("path", f"{path!r}: give an absolute folder path")])
    folder = given.resolve()
    if not folder.is_dir():
        raise ConfigError([FieldProblem("path", f"{folder} is not an existing folder")])
    models = settings.models_dir.resolve()
    if folder == models or models in folder.parents:
        raise ConfigError([FieldProblem("path", f"{folder} is under {models}, which is listed already")])
    with _lock:
        folders = added_folders(settings)
        if folder not in folders:
            _write(settings, [*folders, folder])
    return folder


def forget_folder(settings: Settings, model_id: str) -> Path:
    """Remove the added folder with catalogue id `model_id` from the list (its files are left
    alone); returns its path. Raises NotFound when no added folder has that id."""
    with _lock:
        folders = added_folders(settings)
        match = next((f for f in folders if added_id(f) == model_id), None)
        if match is None:
            raise NotFound(f"no added folder with id {model_id!r}")
        _write(settings, [f for f in folders if f != match])
    return match
