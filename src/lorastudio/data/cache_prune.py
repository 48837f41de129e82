"""The on-disk encode cache's size cap: least recently used entries are removed, whole.

An entry is one <kind>/<model> folder of the cache (data/disk_cache.py): the latents of one
VAE, or the caption embeddings of one set of text encoders, as `lorastudio cache ls` lists
them. A run takes each entry it reads with cache_io.hold_entry: its lock (`.used`) shared, its
mtime set to now (the entry's last use); its latent entry with the readers lock, before its
first encode (training/inputs/latents_disk.hold_latent_entry_early), its text entry before its
captions'. A prune removes entries, oldest last use first, until the cache is at most the cap;
it never removes

- an entry a run holds (its lock is tried exclusively, without waiting: a held one is kept,
  the next older one is tried),
- anything while a clear holds the cache's readers lock (fix 30: the prune holds it shared, as
  a run does, so a clear and a prune never interleave),
- an entry holding anything the cache did not write (kept and named, as `cache clear` refuses).

One prune at a time (cache_io.one_prune: `.prune.lock` in the cache folder, exclusive; a second
prune waits, then measures the cache the first left: two that measured at once each removed the
whole excess). A read-only cache over its cap is refused (CacheError: nothing can be removed).

A removed entry is renamed aside first (a run that opens it meanwhile makes a new one and
encodes what it needs), then deleted; a later run re-encodes what it finds missing.

The cap (`cap_bytes`): Settings.cache_max_gb (LORASTUDIO_CACHE_MAX_GB, in GB of 10^9 bytes, as
`cache ls` counts; 0 keeps only entries in use), else DEFAULT_MAX_GB or FREE_SHARE of the space
the cache could have (its bytes plus its disk's free bytes), whichever is smaller.

When: at the end of a run that used the disk cache (training/loop.py), when a server starts
(a background thread: jobs/leftovers.start_cache_prune), and on request (`lorastudio cache prune
[--max-gb N]`, POST /api/cache/prune). No torch.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lorastudio.data.cache_io import entry_unused, hold_readers, one_prune
from lorastudio.data.disk_cache import CacheStats, cache_leftovers, cache_root, cache_stats, foreign_files
from lorastudio.errors import CacheError
from lorastudio.file_age import older_than

log = logging.getLogger("lorastudio.cache")

DEFAULT_MAX_GB = 50.0  # the cap when LORASTUDIO_CACHE_MAX_GB is unset (or FREE_SHARE, if smaller)
FREE_SHARE = 0.5  # of the cache's bytes plus its disk's free bytes
GB = 10**9


@dataclass(frozen=True)
class PruneResult:
    """What a prune did: the cap, the cache's bytes before and after, the entries removed, and
    those it would have removed but kept (held by a run; holding files the cache did not write)."""

    cap_bytes: int
    before_bytes: int
    after_bytes: int
    removed: list[CacheStats] = field(default_factory=list)
    in_use: list[CacheStats] = field(default_factory=list)
    foreign: list[CacheStats] = field(default_factory=list)

    @property
    def freed_bytes(self) -> int:
        return sum(s.bytes for s in self.removed)


def _free_bytes(root: Path) -> int:
    """Free bytes on the file system of `root` (its nearest existing parent); 0 when unknown."""
    for folder in (root, *root.parents):
        try:
            return shutil.disk_usage(folder).free
        except OSError:
            continue
    return 0


def cap_bytes(settings: Any, root: Path, used_bytes: int) -> int:
    """The cache's cap in bytes (the module docstring): settings.cache_max_gb, else the smaller
    of DEFAULT_MAX_GB and FREE_SHARE of (`used_bytes` + the free bytes of root's disk)."""
    if settings.cache_max_gb is not None:
        return int(settings.cache_max_gb * GB)
    return int(min(DEFAULT_MAX_GB * GB, FREE_SHARE * (used_bytes + _free_bytes(root))))


def prune_cache(root: Path, cap: int) -> PruneResult:
    """Remove whole entries of the cache under `root`, least recently used first, until it holds
    at most `cap` bytes, skipping those in use or holding foreign files (module docstring). One
    prune at a time (cache_io.one_prune: a second waits, then measures what the first left).
    Raises CacheError when the prune or readers lock cannot be used (a read-only cache over its
    cap; a link or a folder at its place)."""
    before = sum(s.bytes for s in cache_stats(root))
    if before <= cap:
        return PruneResult(cap, before, before)
    asides: list[Path] = []  # entries renamed aside: removed once the lock is released
    with one_prune(root):  # another prune's removals are seen: two at once removed twice the excess
        result = _prune_held(root, cap, asides)
    for aside in asides:
        try:
            shutil.rmtree(aside)
        except OSError as err:  # the rest goes at the next server start (jobs/leftovers.py)
            log.warning("could not remove all of the pruned cache entry %s: %s", aside, err)
    return result


def _prune_held(root: Path, cap: int, asides: list[Path]) -> PruneResult:
    """prune_cache's removals while it holds the prune lock: each entry removed is renamed aside
    and appended to `asides` (the caller deletes them)."""
    stats = cache_stats(root)  # measured under the lock: after any other prune's renames
    total = before = sum(s.bytes for s in stats)
    result = PruneResult(cap, before, before)
    if total <= cap:
        return result
    readers = hold_readers(root)  # waits while a clear runs; a run's hold is shared like this one
    try:
        for entry in sorted(stats, key=lambda s: (s.last_used, s.kind, s.model)):
            if total <= cap:
                break
            folder = root / entry.kind / entry.model
            try:
                if foreign_files(folder):
                    result.foreign.append(entry)
                    continue
            except OSError:  # removed meanwhile (another prune, a clear of another home)
                continue
            with entry_unused(root, entry.kind, entry.model) as unused:
                if not unused:
                    result.in_use.append(entry)
                    continue
                aside = folder.with_name(f".{entry.model}.removing.{os.getpid()}.{uuid.uuid4().hex[:8]}")
                try:
                    folder.rename(aside)
                except OSError as err:
                    log.warning("could not prune the cache entry %s: %s", folder, err)
                    continue
            asides.append(aside)
            total -= entry.bytes
            result.removed.append(entry)
    finally:
        if readers is not None:
            os.close(readers)
    return PruneResult(cap, before, total, result.removed, result.in_use, result.foreign)


LEFTOVER_AGE_S = 600.0  # a staged shard is written in seconds: one this old whose writer is gone is left over


def remove_dead_leftovers(root: Path) -> int:
    """Remove what killed writers left in the cache under `root` (disk_cache.cache_leftovers:
    staged shards and entries renamed aside whose process is gone) unchanged for LEFTOVER_AGE_S
    (a writer in another PID namespace sharing the folder looks gone: its fresh files are kept;
    one stamped in the future cannot be judged and is kept: file_age.older_than),
    each logged; returns how many. A server's start removes them too (jobs/leftovers.py); this
    is a CLI user's way."""
    removed = 0
    now = time.time()
    for path in cache_leftovers(root):
        try:
            if not older_than(os.lstat(path).st_mtime, LEFTOVER_AGE_S, now):  # one from the future: kept
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError as err:
            log.warning("could not remove the crash leftover %s: %s", path, err)
            continue
        removed += 1
        log.info("removed the crash leftover %s (its writer was killed)", path)
    return removed


def prune_to_cap(settings: Any, max_gb: float | None = None) -> PruneResult:
    """prune_cache for the cache of `settings` to `max_gb` (GB), else its cap (cap_bytes),
    after removing what killed writers left (remove_dead_leftovers); logs what it removed and
    what it kept over the cap."""
    root = cache_root(settings)
    remove_dead_leftovers(root)  # uncounted by cache_stats: never freed by the cap otherwise
    used = sum(s.bytes for s in cache_stats(root))
    cap = int(max_gb * GB) if max_gb is not None else cap_bytes(settings, root, used)
    result = prune_cache(root, cap)
    for entry in result.removed:
        log.info(
            "pruned the cache entry %s/%s (%.2f GB, least recently used)",
            entry.kind,
            entry.model,
            entry.bytes / GB,
        )
    if result.after_bytes > cap:
        log.warning(
            "the encode cache %s holds %.2f GB, over its cap of %.2f GB: %d entries in use, %d holding other files",
            root,
            result.after_bytes / GB,
            cap / GB,
            len(result.in_use),
            len(result.foreign),
        )
    return result


def prune_after_run(settings: Any) -> PruneResult | None:
    """prune_to_cap at a safe moment: a disk-cached run's end, after it released its entries
    (training/loop.py), or a server's start (jobs/leftovers.start_cache_prune). A prune that
    fails (a link at the readers lock, a disk error) is logged, never fails the run or the
    start: returns None then."""
    try:
        return prune_to_cap(settings)
    except (CacheError, OSError) as err:
        log.warning("the encode cache was not pruned: %s", err)
        return None
