"""The model catalogue: every base model lorastudio can see, recognised and vetted, and the
captioning models (kind "captioner", basemodels/captioners.py).

Sources:
  "tiny"       tiny demo pipelines (and tiny captioners) under models/ (they carry
               lorastudio_tiny.json / lorastudio_tiny_vlm.json)
  "local"      other folders under models/, including those `lorastudio models fetch` downloaded
               (they carry lorastudio_fetch.json)
  "added"      folders the user added (see basemodels.added)
  "hub-cache"  model repos in the Hugging Face hub cache on disk (shared with other tools)
  "catalogue"  a known captioner not on disk yet (KNOWN_CAPTIONERS): no path, its download size,
               `missing` says the command that fetches it (`lorastudio models fetch REPO`)

A captioner is never trainable (its `reason` says what it is for); the base-model pickers leave
kind "captioner" out, the caption dialog offers them.

Listing is bounded and cached: a folder's size walk stops at a depth, an entry count and a time
(basemodels.layout.folder_size: the size is then a lower bound), and a folder's scan is kept until
its fingerprint (its and its components' modification times) changes.

Ids are URL-safe: a models/ folder's name, 'added:<name>-<hash>' or 'hub:<owner>--<name>'. Only what
lorastudio downloaded or created (a fetch or tiny marker, directly under models/, not a link) can
be deleted (basemodels/model_delete.py).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from lorastudio.basemodels.added import added_folders, added_id, refusal
from lorastudio.basemodels.captioners import (
    KNOWN_CAPTIONERS,
    captioner_problems,
    folder_captioner,
    known_captioner,
)
from lorastudio.basemodels.checkpoints import repo_of_folder
from lorastudio.basemodels.hubcache import cached_repos
from lorastudio.basemodels.jsonfile import read_json
from lorastudio.basemodels.layout import MODEL_INDEX, FolderSize, folder_size, weight_suffix
from lorastudio.basemodels.single_file import inspect_file
from lorastudio.basemodels.vetting import Recognition, inspect_folder
from lorastudio.errors import NotFound
from lorastudio.settings import Settings
from lorastudio.tiny import MARKER_FILE as TINY_MARKER
from lorastudio.tiny.vlm import MARKER_FILE as TINY_VLM_MARKER
from lorastudio.user_paths import not_utf8

Source = Literal["local", "hub-cache", "tiny", "added", "catalogue"]
Kind = Literal["pipeline", "single-file", "captioner"]
CAPTIONER_REASON = "a captioning model (for `lorastudio datasets caption`), not a base model to train"
FETCH_MARKER = (
    "lorastudio_fetch.json"  # written last into a fetched folder: {"repo_id", "revision", "commit", ...}
)
HUB_PREFIX = "hub:"
SCAN_CACHE_SIZE = 4096  # folders and checkpoint files whose scan is kept (a few hundred bytes each)
FINGERPRINT_MAX_ENTRIES = 1_000  # a pipeline folder holds a dozen entries; more: not cached
_scan_cache: OrderedDict[str, tuple[tuple[Any, ...], tuple[Recognition, FolderSize]]] = OrderedDict()
_cache_lock = threading.Lock()


@dataclass(frozen=True)
class ModelEntry:
    """One catalogue entry (the JSON shape of GET /api/models)."""

    id: str
    name: str
    source: Source
    path: str
    family: str | None
    trainable: bool
    reason: str | None
    size_bytes: int
    complete: bool
    missing: list[str]
    deletable: bool
    checkpoint: str | None = None  # a known checkpoint's title and note (basemodels/checkpoints.py)
    distilled: bool | None = None  # step-distilled (turbo); None when nothing says
    kind: Kind = "pipeline"  # a pipeline folder, one checkpoint file, or a captioning model
    repo_id: str | None = None  # a captioner's hub id (a fetched model's marker, a known row)
    licence: str | None = None  # a known captioner's licence (KNOWN_CAPTIONERS)

    def public(self) -> dict[str, Any]:
        return asdict(self)


def read_fetch_marker(folder: Path) -> dict[str, Any] | None:
    """The fetch marker of `folder` ({"repo_id", "revision", "commit", "family", ...}) or None."""
    try:
        data = read_json(folder / FETCH_MARKER)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("repo_id"), str) else None


def _has_tiny_marker(folder: Path) -> bool:
    return (folder / TINY_MARKER).is_file() or (folder / TINY_VLM_MARKER).is_file()


def _fingerprint(folder: Path) -> tuple[Any, ...] | None:
    """What changes when a model folder's content changes: the folder's and its sub-folders'
    (the components') identity and modification times, and model_index.json's. A folder with
    more entries than a pipeline folder ever has (an added photo library) is no pipeline: its
    scan says so from its top-level names, which change its own modification time, so that
    time alone is its fingerprint (it was never cached: every listing read its every entry
    again). None when the folder cannot be read (not cached)."""
    try:
        top = folder.stat()
        parts: list[Any] = [top.st_ino, top.st_mtime_ns]
        with os.scandir(folder) as entries:
            for i, entry in enumerate(entries):
                if i >= FINGERPRINT_MAX_ENTRIES:
                    return ("many", top.st_dev, top.st_ino, top.st_mtime_ns)
                if entry.is_dir() or entry.name == MODEL_INDEX:
                    st = entry.stat()
                    parts.append((entry.name, st.st_ino, st.st_mtime_ns, st.st_size))
    except OSError:
        return None
    return tuple(sorted(parts[2:])) + tuple(parts[:2])


def scan_folder(folder: Path, *, walk: bool = True) -> tuple[Recognition, FolderSize]:
    """`inspect_folder` and the bounded `folder_size` of `folder` (walk=False: size 0, not
    walked), cached until its fingerprint changes (so listing the catalogue again does not walk
    every model folder again)."""
    key = f"{folder}\0{walk}"
    fingerprint = _fingerprint(folder)
    with _cache_lock:
        hit = _scan_cache.get(key)
        if hit is not None and fingerprint is not None and hit[0] == fingerprint:
            _scan_cache.move_to_end(key)
            return hit[1]
    result = (inspect_folder(folder), folder_size(folder) if walk else FolderSize(0, False))
    if fingerprint is not None:
        with _cache_lock:
            _scan_cache[key] = (fingerprint, result)
            while len(_scan_cache) > SCAN_CACHE_SIZE:
                _scan_cache.popitem(last=False)
    return result


def scan_file(path: Path) -> tuple[Recognition, FolderSize]:
    """`inspect_file` of the checkpoint `path` (its header read and checked) and its size,
    cached until the file changes (device, inode, size, modification and change times): a
    header is up to MAX_CHECKPOINT_HEADER bytes, whose check takes a second or more, and the
    catalogue is listed again on every visit of the Models screen. Raises OSError when the
    file cannot be stat'ed."""
    st = path.stat()
    fingerprint = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    key = f"{path}\0file"
    with _cache_lock:
        hit = _scan_cache.get(key)
        if hit is not None and hit[0] == fingerprint:
            _scan_cache.move_to_end(key)
            return hit[1]
    result = (inspect_file(path), FolderSize(st.st_size, True))
    with _cache_lock:
        _scan_cache[key] = (fingerprint, result)
        while len(_scan_cache) > SCAN_CACHE_SIZE:
            _scan_cache.popitem(last=False)
    return result


MAX_MISSING = 20  # entries of `missing` an entry lists (then "... and N more")
MAX_TEXT = 2_000  # characters of a reason or a missing entry an entry lists


def _bounded(text: str | None) -> str | None:
    """`text` cut to MAX_TEXT characters: a model_index.json names its components and class,
    and a listing must not grow with what a damaged one holds."""
    if text is None or len(text) <= MAX_TEXT:
        return text
    return f"{text[:MAX_TEXT]}... ({len(text) - MAX_TEXT} more characters)"


def _bounded_missing(missing: Collection[str]) -> list[str]:
    """The first MAX_MISSING entries of `missing` (each bounded), then how many more."""
    items = [str(_bounded(m)) for m in list(missing)[:MAX_MISSING]]
    if len(missing) > MAX_MISSING:
        items.append(f"... and {len(missing) - MAX_MISSING} more")
    return items


def _entry(
    model_id: str, name: str, source: Source, folder: Path, deletable: bool, size: int | None
) -> ModelEntry:
    if (why := not_utf8(folder)) is not None:  # listed "yes" before, refused by every use (RELIABILITY 1034)
        return ModelEntry(
            id=model_id,
            name=name,
            source=source,
            path=str(folder),
            family=None,
            trainable=False,
            reason=f"{why}: a config or a request cannot name it; rename it",
            size_bytes=size or 0,
            complete=False,
            missing=[],
            deletable=deletable,
        )
    if folder.is_dir() and folder_captioner(folder) is not None:
        return _captioner_entry(model_id, name, source, folder, deletable, size)
    if folder.is_file():  # a single-file checkpoint (basemodels/single_file.py): its header only
        rec, found = scan_file(folder)
        kind: Literal["pipeline", "single-file"] = "single-file"
    else:
        rec, found = scan_folder(folder, walk=size is None)
        kind = "pipeline"
    return ModelEntry(
        id=model_id,
        name=name,
        source=source,
        path=str(folder),
        family=rec.family,
        trainable=rec.trainable,
        reason=_bounded(rec.reason),
        size_bytes=found.bytes if size is None else size,
        complete=rec.complete,
        missing=_bounded_missing(rec.missing),
        deletable=deletable,
        checkpoint=rec.checkpoint,
        distilled=rec.distilled,
        kind=kind,
    )


def _captioner_entry(
    model_id: str, name: str, source: Source, folder: Path, deletable: bool, size: int | None
) -> ModelEntry:
    """The entry of a captioner folder: complete when its config, weights and processor are there."""
    missing = captioner_problems(folder)
    repo = repo_of_folder(folder)
    known = known_captioner(repo)
    return ModelEntry(
        id=model_id,
        name=name,
        source=source,
        path=str(folder),
        family=None,
        trainable=False,
        reason=CAPTIONER_REASON,
        size_bytes=folder_size(folder).bytes if size is None else size,
        complete=not missing,
        missing=_bounded_missing(missing),
        deletable=deletable,
        checkpoint=f"{known.title}: {known.note}" if known else None,
        kind="captioner",
        repo_id=repo,
        licence=known.licence if known else None,
    )


def _known_captioner_entries(settings: Settings, present: set[str]) -> list[ModelEntry]:
    """The known captioners that are not on disk (not in models/ nor the hub cache), to fetch."""
    return [
        ModelEntry(
            id=row.model_id,
            name=row.repo_id,
            source="catalogue",
            path="",
            family=None,
            trainable=False,
            reason=CAPTIONER_REASON,
            size_bytes=row.size_bytes,
            complete=False,
            missing=[f"not fetched: `lorastudio models fetch {row.repo_id}`"],
            deletable=False,
            checkpoint=f"{row.title}: {row.note}",
            kind="captioner",
            repo_id=row.repo_id,
            licence=row.licence,
        )
        for row in KNOWN_CAPTIONERS
        if row.repo_id.lower() not in present and not (settings.models_dir / row.model_id).exists()
    ]


def _models_dir_entries(settings: Settings) -> list[ModelEntry]:
    root = settings.models_dir
    if not root.is_dir():
        return []
    entries = []
    for folder in sorted(root.iterdir(), key=lambda p: p.name.lower()):
        if folder.name.startswith("."):
            continue
        if not folder.is_dir():
            if folder.is_file() and weight_suffix(folder.name) is not None:
                entries.append(_entry(folder.name, folder.name, "local", folder, False, None))
            continue
        owned = not folder.is_symlink()
        marker = read_fetch_marker(folder) if owned else None
        if owned and _has_tiny_marker(folder):
            entries.append(_entry(folder.name, folder.name, "tiny", folder, True, None))
        elif marker is not None:
            rev = marker.get("revision")
            name = marker["repo_id"] + (f"@{rev}" if rev else "")
            entries.append(_entry(folder.name, name, "local", folder, True, None))
        else:
            entries.append(_entry(folder.name, folder.name, "local", folder, False, None))
    return entries


def _added_entries(settings: Settings) -> list[ModelEntry]:
    """The added folders; one that is refused today (a list written by an older version may hold
    "/") is listed, so it can be forgotten, but its files are not walked (size 0)."""
    return [
        _entry(added_id(f), f.name, "added", f, False, 0 if refusal(f, settings) else None)
        for f in added_folders(settings)
    ]


def _hub_entries() -> list[ModelEntry]:
    return [
        _entry(
            HUB_PREFIX + r.repo_id.replace("/", "--"), r.repo_id, "hub-cache", r.snapshot, False, r.size_bytes
        )
        for r in cached_repos()
    ]


def list_models(
    settings: Settings, *, hub_cache: bool = True, known_captioners: bool = True
) -> list[ModelEntry]:
    """Every model lorastudio can see: models/ folders (tiny, fetched, the user's), added
    folders, then (unless `hub_cache` is False) the hub cache, then (unless `known_captioners`
    is False) the known captioners not on disk (source "catalogue"). Only reads."""
    entries = _models_dir_entries(settings) + _added_entries(settings)
    if hub_cache:
        entries += _hub_entries()
    if not known_captioners:
        return entries
    present = {e.repo_id.lower() for e in entries if e.kind == "captioner" and e.repo_id}
    return entries + _known_captioner_entries(settings, present)


def get_model(settings: Settings, model_id: str) -> ModelEntry:
    """The catalogue entry with id `model_id`. Raises NotFound."""
    for entry in list_models(settings, hub_cache=model_id.startswith(HUB_PREFIX)):
        if entry.id == model_id:
            return entry
    raise NotFound(f"no model with id {model_id!r} (see GET /api/models or `lorastudio models list`)")


def fetched_folder(settings: Settings, repo_id: str, revision: str | None = None) -> Path | None:
    """The models/ folder that `lorastudio models fetch` made for `repo_id` at `revision`, or
    None. Only a folder whose marker names this repo and revision counts."""
    from lorastudio.basemodels.fetch import fetch_target

    folder = fetch_target(settings, repo_id, revision)
    marker = read_fetch_marker(folder)
    if marker and marker.get("repo_id") == repo_id and marker.get("revision") == revision:
        return folder
    return None
