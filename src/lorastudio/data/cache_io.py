"""The on-disk encode cache's file I/O (layout and keys: data/disk_cache.py): a run's shards read
and written through file descriptors walked down from the cache folder, never through a link.

Each folder below the cache folder is opened with O_NOFOLLOW relative to its parent's
descriptor (openat), and a shard with O_NOFOLLOW | O_NONBLOCK, then fstat'ed: a link, a FIFO
(which would block a reader for ever), a device or a folder planted at a shard's or a folder's
place reads as a missing shard (the run re-encodes it) and a write there fails (the run keeps
the shard in RAM), never touching a file elsewhere. A shard over MAX_SHARD_BYTES is not read.
Hand-written: pathlib and safetensors open by path and follow links. No torch.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from lorastudio.capped_read import read_capped
from lorastudio.data.disk_cache import ENTRY_LOCK, USE_STEP_NS, newest_use_ns, staging_name
from lorastudio.errors import CacheError
from lorastudio.file_modes import cache_shared_files, follow_umask_fd, mend_once

MAX_SHARD_BYTES = 1 << 30  # one variant's latents or one caption's embedding is far below this
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_folder(root: Path, names: Sequence[str], create: bool) -> int:
    """A file descriptor of root/names[0]/names[1]/..., each below `root` opened without
    following a link (O_NOFOLLOW: ELOOP on a link, ENOTDIR on a file); made when `create`.
    Raises OSError."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # root may be a link
    try:
        for name in names:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o777, dir_fd=fd)
            inner = os.open(name, _DIR_FLAGS, dir_fd=fd)
            if create:
                follow_umask_fd(inner)  # an older version's 0755 folder (file_modes.py)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


_IN_THE_WAY = frozenset({errno.ELOOP, errno.ENOTDIR, errno.EEXIST})  # a link or a file where a folder goes


def prepare_cache_folder(root: Path, kind: str, model: str) -> Path:
    """Make `root`/kind/model for a run's shards (root with its parents) and return it.
    Raises CacheError naming the path when a link or a file is in the way (the run would
    otherwise keep every shard in RAM without a word). A cache it may not write (read-only, no
    permission) is left to the reads: its shards are used, the missing ones kept in RAM."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        os.close(_open_folder(root, (kind, model), create=True))
    except OSError as err:
        if err.errno not in _IN_THE_WAY:
            return root / kind / model
        raise CacheError(
            "the on-disk encode cache cannot be used",
            [
                f"{root / kind / model}: {err.strerror or err} (a link or a file where the cache's folders "
                "go: remove it, or set LORASTUDIO_CACHE_DIR to another folder)"
            ],
        ) from None
    return root / kind / model


def _below(shard: Path) -> tuple[Path, tuple[str, ...]]:
    """(the cache folder, the names below it: kind, model, prefix) of shard path `shard`
    (disk_cache.shard_path's layout)."""
    return shard.parents[3], shard.parts[-4:-1]


def read_shard_bytes(shard: Path) -> bytes | None:
    """The bytes of `shard` (a disk_cache.shard_path), or None when it is missing, not a
    regular file (a link, a folder, a FIFO, a device), under a link, larger than
    MAX_SHARD_BYTES or unreadable."""
    root, names = _below(shard)
    try:
        folder = _open_folder(root, names, create=False)
    except OSError:
        return None
    try:
        fd = os.open(shard.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        return None
    finally:
        os.close(folder)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SHARD_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = read_capped(fh, MAX_SHARD_BYTES + 1)
        return data if len(data) <= MAX_SHARD_BYTES else None
    except OSError:
        return None
    finally:
        os.close(fd)


def write_shard_bytes(shard: Path, data: bytes, problems: list[str] | None = None) -> bool:
    """Write `data` to `shard` (a disk_cache.shard_path): staged beside it, then renamed onto
    it, its folders made and walked without following links. Returns False when it cannot be
    written (disk full, a link or a folder in the way, the cache cleared under the run), and then
    appends "<shard>: <the reason>" to `problems` where given (what a run tells: RELIABILITY 1742)."""
    root, names = _below(shard)
    staged = staging_name(shard).name
    try:
        folder = _open_folder(root, names, create=True)
    except OSError as err:
        if problems is not None:
            problems.append(f"{shard}: {err.strerror or err}")
        return False
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(staged, flags, 0o666, dir_fd=folder), "wb") as fh:
            fh.write(data)
        os.replace(staged, shard.name, src_dir_fd=folder, dst_dir_fd=folder)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.unlink(staged, dir_fd=folder)
        if problems is not None:
            problems.append(f"{shard}: {err.strerror or err}")
        return False
    finally:
        os.close(folder)
    return True


READERS_LOCK = ".readers.lock"  # in the cache folder: runs hold it shared, a clear exclusive
# A cache folder this process cannot write its lock into: read-only, not its own, or full (no
# block or inode left for the lock file): a run then uses no disk cache rather than failing
_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT)


def hold_readers(root: Path) -> int | None:
    """Take the cache's readers lock shared (flock on `root`/READERS_LOCK, made when missing;
    waits while a clear holds it): held by a run that reads shards, so a clear (`readers_gone`)
    from any process or studio home sharing this cache folder is refused meanwhile. Returns the
    descriptor: closing it (or the process's end, kill -9 included) releases it; None for a
    cache this process may not write (read-only, or full with no lock file there yet: it cannot
    clear it either).
    Raises CacheError naming the lock when a link or a folder is there, and naming the cache
    folder when a file is where it (or a folder above it) goes."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as err:  # not "<root>/.readers.lock: File exists"
        raise CacheError(
            "the on-disk encode cache cannot be used",
            [
                f"{root}: {err.strerror or err} (a file where the cache folder or a folder above it "
                "goes: remove it, or set LORASTUDIO_CACHE_DIR to another folder)"
            ],
        ) from None
    except OSError:  # a parent this process may not write: the open below says what it can
        pass
    mend_once(root, lambda: cache_shared_files(root))  # an older version's 0755 folders (file_modes.py)
    try:
        fd = os.open(root / READERS_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        follow_umask_fd(fd)  # an older version's 0600 lock (file_modes.py)
    except OSError as err:
        if err.errno in _NOT_WRITABLE or (err.errno == errno.ENOENT and not root.is_dir()):
            # ENOENT: the folder could not be made above (an empty cache on a read-only mount)
            try:
                fd = os.open(root / READERS_LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                return None
            fcntl.flock(fd, fcntl.LOCK_SH)
            return fd
        raise CacheError(
            "the on-disk encode cache cannot be used",
            [f"{root / READERS_LOCK}: {err.strerror or err} (remove what is there)"],
        ) from None
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


@contextlib.contextmanager
def readers_gone(root: Path) -> Iterator[None]:
    """Hold the cache's readers lock exclusively for a clear. Raises CacheError naming the
    pids of the runs that read the cache (jobs may share one cache folder across homes)."""
    try:
        fd = os.open(root / READERS_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except FileNotFoundError:  # no cache folder: nothing to clear, nobody reads it
        yield
        return
    except OSError as err:
        raise CacheError(
            "the cache was not cleared", [f"{root / READERS_LOCK}: {err.strerror or err}"]
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            from lorastudio.jobs.homelock import lock_holders

            pids = ", ".join(map(str, lock_holders(root / READERS_LOCK))) or "unknown"
            if _pruning(root):  # a prune holds the readers lock shared too, as a run does
                raise CacheError(
                    "the cache was not cleared: a prune of it is under way",
                    [f"{root}: held by pid {pids} (a prune, or a run reading it); clear it when they end"],
                ) from None
            raise CacheError(
                "the cache was not cleared: a training run reads it",
                [f"{root}: read by the run of pid {pids}; clear it when the run ends"],
            ) from None
        yield
    finally:
        os.close(fd)


PRUNE_LOCK = ".prune.lock"  # in the cache folder: one prune at a time (data/cache_prune.py)


def _pruning(root: Path) -> bool:
    """Whether a prune holds the cache's prune lock now (one_prune), of any process."""
    try:
        fd = os.open(root / PRUNE_LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:  # BlockingIOError: held exclusively
        return True
    finally:
        os.close(fd)
    return False


@contextlib.contextmanager
def one_prune(root: Path) -> Iterator[None]:
    """Hold the cache's prune lock exclusively (flock on `root`/PRUNE_LOCK, made when missing;
    waits while another prune, of any process or studio home sharing the folder, holds it), so
    each prune measures the cache after the one before it. Raises CacheError naming the lock
    when the folder may not be written (read-only: nothing can be removed) or a link, a folder
    or a FIFO is there."""
    try:
        fd = os.open(
            root / PRUNE_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666
        )
    except OSError as err:
        why = (
            "read-only: nothing can be removed"
            if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS)
            else "remove what is there"
        )
        raise CacheError(
            "the cache was not pruned", [f"{root / PRUNE_LOCK}: {err.strerror or err} ({why})"]
        ) from None
    try:
        mend_once(root, lambda: cache_shared_files(root))  # an older version's 0755 folders (file_modes.py)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CacheError(
                "the cache was not pruned", [f"{root / PRUNE_LOCK}: not a regular file (remove it)"]
            )
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


_ENTRY_RETRIES = 20  # a run re-opens an entry a prune removed meanwhile (the prune is brief)


def _open_entry_lock(root: Path, kind: str, model: str, create: bool) -> tuple[int, int]:
    """(the entry folder's descriptor, its ENTRY_LOCK's), both opened without following a link;
    the lock is made when missing (read-only where it may not be written). Raises OSError."""
    folder = _open_folder(root, (kind, model), create=create)
    try:
        try:
            fd = os.open(
                ENTRY_LOCK,
                os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                0o666,
                dir_fd=folder,
            )
        except PermissionError:  # a cache this process may read, not write
            fd = os.open(
                ENTRY_LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder
            )
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO planted there
            os.close(fd)
            raise IsADirectoryError(errno.EISDIR, "not a regular file", ENTRY_LOCK)
    except BaseException:
        os.close(folder)
        raise
    return folder, fd


def _still_there(root: Path, kind: str, model: str, folder: int, fd: int) -> bool:
    """Whether entry folder `folder` is still root/kind/model and lock `fd` still its ENTRY_LOCK
    (a prune renames the folder aside before removing it)."""
    try:
        here, lock = os.lstat(root / kind / model), os.stat(ENTRY_LOCK, dir_fd=folder, follow_symlinks=False)
        mine, held = os.fstat(folder), os.fstat(fd)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino) and lock.st_ino == held.st_ino


def hold_entry(root: Path, kind: str, model: str) -> int | None:
    """Hold the cache entry root/kind/model (one encoder's shards, as `cache ls` lists them) for
    a run that reads it: its ENTRY_LOCK taken shared (waits while a prune removes the entry,
    then re-opens the new one) and its mtime set to now, or past the newest use of the cache's
    entries after a clock set back (`_stamp_use`: the entry's last use; a prune
    removes the least recently used entries first, data/cache_prune.py). Take it before the run looks at
    the entry's shards. Returns the descriptor (closing it, or the process's end, releases it);
    None when the entry cannot be held (a cache this process may not read or write: its runs
    keep what they encode in RAM)."""
    for _ in range(_ENTRY_RETRIES):
        try:
            folder, fd = _open_entry_lock(root, kind, model, create=True)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            if _still_there(root, kind, model, folder, fd):
                with contextlib.suppress(OSError):  # a read-only lock: the last use stays unknown
                    _stamp_use(root, kind, model, fd)
                return fd
        except OSError:
            pass
        finally:
            os.close(folder)
        os.close(fd)  # the entry was removed under us: hold the new one
    return None


def _stamp_use(root: Path, kind: str, model: str, fd: int) -> None:
    """Set ENTRY_LOCK `fd`'s mtime to now (a group member's lock too: write access is enough),
    then, when another entry's last use is as new or newer (the wall clock set back since it),
    just past that one (disk_cache.newest_use_ns), so that the order of last uses is the order
    of uses; only the lock's owner may set a given time (another user's keeps now). Raises
    OSError (a read-only lock)."""
    os.utime(fd)
    newest = newest_use_ns(root, (kind, model))
    if newest >= os.fstat(fd).st_mtime_ns:
        with contextlib.suppress(PermissionError):
            os.utime(fd, ns=(newest + USE_STEP_NS, newest + USE_STEP_NS))


@contextlib.contextmanager
def entry_unused(root: Path, kind: str, model: str) -> Iterator[bool]:
    """Hold entry root/kind/model's ENTRY_LOCK exclusively, without waiting: yields True when no
    run holds the entry (it may be removed meanwhile), False when one does or it is gone."""
    try:
        folder, fd = _open_entry_lock(root, kind, model, create=False)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # a run holds it (BlockingIOError)
            yield False
            return
        yield _still_there(root, kind, model, folder, fd)
    finally:
        os.close(folder)
        os.close(fd)
