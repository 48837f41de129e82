"""The on-disk encode cache: where its shards live, how they are keyed, listed and cleared.

A shard is one safetensors file holding what one encoder call produced for one thing (a crop/flip
variant of an image: its VAE posterior; see training/inputs/latents_disk.py). Layout under the cache
folder (Settings.cache_dir, default <home>/cache/encoded):

    <kind>/<model>/<key[:2]>/<key>.safetensors     kind "latents"; model: the encoder's fingerprint
    <kind>/<model>/.used                           the entry's lock; its mtime: the entry's last use

An entry (one <kind>/<model> folder) is what `cache ls` lists and a prune removes whole, least
recently used first, never one a run holds (data/cache_prune.py, cache_io.hold_entry).

`key` is the sha256 of every key part (`shard_key`): the schema version, the family, the encoder
fingerprint, the image's content hash, the bucket, the resized size, the crop offset and flip, the
dtype and device kind of the encode, and the content hashes of its control images. Any change
gives another file name: a stale shard is never read, only left for `clear`. Shards are written
to a temporary name in the same folder and renamed onto the final one, so a reader sees a whole
file or none; two runs writing one key write the same bytes and the last rename wins.

The encoder fingerprint (`component_fingerprint`, data/fingerprint.py, re-exported here) covers
the component's files (names, sizes, a sample of their bytes) and its config.json.

Nothing below the cache folder is followed through a link or taken on its name alone: shards
are read and written through file descriptors walked down from the cache folder with
O_NOFOLLOW (data/cache_io.py), so a link, a FIFO, a device or a folder
planted at a shard's or a folder's place reads as a missing shard (re-encoded), never as a
file elsewhere, and a shard over MAX_SHARD_BYTES is not read. Listing and clearing see only
folders named as the cache names them (a 20-hex fingerprint, 2-hex prefixes, 64-hex shards)
that are real folders; `clear_cache` refuses (CacheError naming each path) a model folder
holding anything else, so a LORASTUDIO_CACHE_DIR pointed at a folder of other files, or a
`latents` link planted to one, never removes them. cache_io.prepare_cache_folder makes a run's
<kind>/<model> folders and refuses (CacheError) a link or a file there, rather than keeping
every shard in RAM. The cache folder itself may be a link (LORASTUDIO_CACHE_DIR).

Imports no torch (the server and the CLI list and clear the cache through it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lorastudio.data.fingerprint import (  # noqa: F401 (re-exported: the cache's keys use them)
    FULL_HASH_BYTES,
    RULE,
    SAMPLE_BYTES,
    SAMPLES,
    TOKENIZER_FILES,
    _sampled_digest,
    component_fingerprint,
    component_on_disk,
    source_on_disk,
)
from lorastudio.errors import CacheError
from lorastudio.processes import process_alive
from lorastudio.staged_files import staged_writer

SCHEMA = "lorastudio-encoded-v1"
KINDS = ("latents", "text")
SHARD_SUFFIX = ".safetensors"
MAX_SHARD_BYTES = (
    1 << 30
)  # a shard larger than this is not read (one variant's latents, one caption's embedding)
_MODEL = re.compile(r"^[0-9a-f]{20}$")  # component_fingerprint / text_keys.text_fingerprint
_PREFIX = re.compile(r"^[0-9a-f]{2}$")
_SHARD = re.compile(r"^[0-9a-f]{64}\.safetensors$")
ENTRY_LOCK = ".used"  # in each <kind>/<model> entry: runs hold it shared, a prune exclusive; mtime = last use


def cache_root(settings: Any) -> Path:
    """The cache folder of `settings` (Settings.cache_dir, else <home>/cache/encoded)."""
    return Path(settings.cache_dir) if settings.cache_dir is not None else settings.home / "cache" / "encoded"


def shard_key(parts: dict[str, Any]) -> str:
    """The file name (hex sha256) of a shard with these key parts (JSON-able values)."""
    payload = json.dumps({"schema": SCHEMA, **parts}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()


def shard_path(root: Path, kind: str, model: str, key: str) -> Path:
    """Where the shard `key` of encoder fingerprint `model` lives."""
    return root / kind / model / key[:2] / f"{key}{SHARD_SUFFIX}"


def staging_name(final: Path) -> Path:
    """A temporary name beside `final`, unique to this process (renamed onto `final` when whole):
    `.<key>.safetensors.<pid>.tmp`, a staging name of lorastudio/staged_files.py's rule."""
    return final.with_name(f".{final.name}.{os.getpid()}.tmp")


def _is_real_dir(path: Path) -> bool:
    """A folder, not a link to one (lstat)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _is_real_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


@dataclass(frozen=True)
class CacheStats:
    """One kind's shards on disk: per encoder fingerprint, files and bytes."""

    kind: str
    model: str
    files: int
    bytes: int
    last_used: float = 0.0  # entry_last_use: epoch seconds


def entry_last_use(folder: Path) -> float:
    """When entry folder `folder` (<kind>/<model>) was last used: its ENTRY_LOCK's mtime (a run
    sets it when it takes the entry, cache_io.hold_entry), else (an entry from before the lock)
    the newest mtime of the folder and its prefix folders (a shard written there changes it).
    0.0 when none can be read."""
    try:
        return os.lstat(folder / ENTRY_LOCK).st_mtime
    except OSError:
        pass
    times = []
    for path in [folder, *_real_subdirs(folder, _PREFIX)]:
        try:
            times.append(os.lstat(path).st_mtime)
        except OSError:  # removed meanwhile
            continue
    return max(times, default=0.0)


USE_STEP_NS = 1_000  # a use stamps at least this past the newest (a float's mtime keeps 0.24 µs)


def newest_use_ns(root: Path, but: tuple[str, str]) -> int:
    """The newest ENTRY_LOCK mtime (ns) of the entries under `root` other than `but` (kind,
    model); 0 when none. cache_io.hold_entry stamps a use past it when the wall clock was set
    back since that use (an NTP step, a VM's clock corrected): a prune's least recently used is
    then the one used longest ago in the order of uses, never the one a run used since the step."""
    newest = 0
    for kind in KINDS:
        for model in _real_subdirs(root / kind, _MODEL):
            if (kind, model.name) == but:
                continue
            with contextlib.suppress(OSError):  # an entry from before the lock, or removed meanwhile
                newest = max(newest, os.lstat(model / ENTRY_LOCK).st_mtime_ns)
    return newest


def _real_subdirs(folder: Path, pattern: re.Pattern[str]) -> list[Path]:
    """The sub-folders of `folder` named by `pattern` that are real folders (no links)."""
    if not _is_real_dir(folder):
        return []
    try:
        return sorted(p for p in folder.iterdir() if pattern.match(p.name) and _is_real_dir(p))
    except OSError:
        return []


def _shards(folder: Path) -> list[Path]:
    """The shards (regular files named as shards) in a model folder's prefix folders."""
    out = []
    for prefix in _real_subdirs(folder, _PREFIX):
        try:
            out += [p for p in prefix.iterdir() if _SHARD.match(p.name) and _is_real_file(p)]
        except OSError:
            continue
    return out


def _sizes(paths: Iterable[Path]) -> list[int]:
    sizes = []
    for p in paths:
        try:
            sizes.append(os.lstat(p).st_size)
        except OSError:  # removed meanwhile
            continue
    return sizes


def cache_stats(root: Path) -> list[CacheStats]:
    """Every (kind, model fingerprint) folder under `root` with its shard count and bytes; only
    real folders named as the cache names them (a folder being removed by clear_cache is hidden)."""
    out = []
    for kind in KINDS:
        for model in _real_subdirs(root / kind, _MODEL):
            sizes = _sizes(_shards(model))
            out.append(CacheStats(kind, model.name, len(sizes), sum(sizes), entry_last_use(model)))
    return out


def count_present(root: Path, kind: str, model: str, keys: Sequence[str]) -> int:
    """How many of `keys` have a shard on disk (not checked: a run verifies each it reads)."""
    return sum(_is_real_file(shard_path(root, kind, model, k)) for k in keys)


def foreign_files(folder: Path) -> list[Path]:
    """What the cache did not write in model folder `folder`: anything but 2-hex prefix
    folders holding shards and staged shards, and the entry's lock (links included, never
    followed)."""
    out = []
    for entry in sorted(folder.iterdir()):
        if entry.name == ENTRY_LOCK and _is_real_file(entry):
            continue
        if not (_PREFIX.match(entry.name) and _is_real_dir(entry)):
            out.append(entry)
            continue
        for path in sorted(entry.iterdir()):
            if not ((_SHARD.match(path.name) or _STAGED.match(path.name)) and _is_real_file(path)):
                out.append(path)
    return out


def clear_cache(root: Path, kind: str | None = None, model: str | None = None) -> int:
    """Remove shards: every kind, one `kind`, or one kind's `model` folder. Each folder is first
    renamed aside (so no run finds a half-removed set), then deleted once the readers lock is
    released (a run starting meanwhile waits for the renames, not the removals). Returns bytes freed.
    Raises CacheError, removing nothing, when a folder to clear holds anything the cache did
    not write (each path named, at most 20) or a run reads the cache (cache_io.readers_gone:
    a run holds its readers lock shared, from any studio home sharing the folder)."""
    chosen = [
        s
        for s in cache_stats(root)
        if (kind is None or s.kind == kind) and (model is None or s.model == model)
    ]
    foreign = [p for s in chosen for p in foreign_files(root / s.kind / s.model)]
    if foreign:
        raise CacheError(
            f"the cache in {root} was not cleared: {len(foreign)} entries the cache did not write",
            [
                f"{p}: not a cache shard (a link, a folder or another file): move it out of the cache"
                for p in foreign[:20]
            ],
        )
    from lorastudio.data.cache_io import readers_gone

    asides = []
    with readers_gone(root):  # CacheError while a run (of any home sharing the folder) reads it
        for stats in chosen:
            folder = root / stats.kind / stats.model
            # unique per clear: a killed clear's aside of a since reused pid may lie there
            aside = folder.with_name(f".{stats.model}.removing.{os.getpid()}.{uuid.uuid4().hex[:8]}")
            folder.rename(aside)
            asides.append(aside)
    for aside in asides:  # out of the lock: a run starting meanwhile waits for the renames only
        shutil.rmtree(aside)
    return sum(stats.bytes for stats in chosen)


def latent_mode(setting: str, need_bytes: int, max_gb: float) -> str:
    """How a run caches its latents: "memory", "disk" or "per_step" (encoded every step), from
    cfg.latent_cache (`setting`), the RAM the in-memory cache would take and latent_cache_max_gb:
    memory = RAM up to the budget, else per step; auto = RAM up to the budget, else disk."""
    fits = need_bytes <= max_gb * 1024**3
    if setting == "off":
        return "per_step"
    if setting == "disk":
        return "disk"
    if setting == "memory":
        return "memory" if fits else "per_step"
    return "memory" if fits else "disk"


def folder_bytes(folder: Path) -> int:
    """Bytes of the shards under one model folder (0 when it does not exist)."""
    return sum(_sizes(_shards(folder)))


_STAGED = re.compile(r"^\.[0-9a-f]{64}\.safetensors\.(\d+)\.tmp$")  # staging_name
_REMOVING = re.compile(r"^\..+\.removing\.(\d+)(?:\.[0-9a-f]{8})?$")  # clear_cache (older: no id)


def cache_leftovers(root: Path) -> list[Path]:
    """What a killed writer left in the cache: staged shards and folders renamed aside for
    removal whose process (the pid in the name) is gone. jobs/leftovers.py removes them."""
    found: list[Path] = []
    for kind in KINDS:
        for model in _entries(root / kind):
            removing = _REMOVING.match(model.name)
            if removing:
                found += [model] if not process_alive(int(removing.group(1))) else []
                continue
            for prefix in _entries(model):
                for path in _entries(prefix):
                    writer = staged_writer(path.name) if _STAGED.match(path.name) else None
                    if writer is not None and not process_alive(writer):  # staged_files.py's rule
                        found.append(path)
    return found


def _entries(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir()) if folder.is_dir() and not folder.is_symlink() else []
    except OSError:
        return []
