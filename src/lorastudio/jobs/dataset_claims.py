"""Cross-process claims on dataset folders: caption writers alone, readers together.

Every process of a studio home that writes captions into a dataset (a server caption job, `lorastudio
datasets caption`, a bulk caption edit, an upload, a single caption edit, a dataset delete) takes an
exclusive claim on it, and every run that reads captions (a server run, queued or running, and a
CLI `lorastudio train`, each rank) takes a shared one. A claim is an advisory lock (flock, taken
without waiting) on `<home>/claims/<key>.lock`: any number of readers, or one writer; a refusal
raises DatasetBusy (409 in the API, exit 2 in the CLI) naming the dataset and the holders. The
kernel drops the lock when its holder dies (kill -9 included), so a dead holder never leaves a
dataset stuck. Each holder also writes `<key>.<pid>-<id>.holder` (who holds it, for the refusal
message); a record whose pid holds no lock any more is a crash leftover, removed by the next
take or refusal on that dataset, and so is a record that is not a whole, well-typed one
(records are renamed in whole) and a killed taker's staged record (`.<record>.<pid>-<hex>.tmp`). Nothing in the claims folder is followed: a link, a folder or
a FIFO planted at a lock's place is removed (the entry only) and a regular lock made; records
are read without following links or blocking, 64 KiB at most.

The key is the dataset, not the folder: a folder inside the home's datasets root is claimed as its
top folder (`datasets/char/10_sks` claims `char`, so a kohya sub-folder and its parent conflict),
and so is a folder inside another studio home's datasets root (a CLI run with another
LORASTUDIO_HOME reading this home's dataset by its absolute path: the top folder under that
home's `datasets/`, found by the home's lock file or run store beside it); any other folder (a
CLI run's absolute data_dir) as itself. A dataset is locked under two keys
(`claim_keys`): its resolved path (NFC) and, when it exists, its (device, inode), so the two
spellings of one folder on a case- or normalisation-insensitive file system are one claim. An edit through the API (an upload,
a caption edit, a delete) claims `brief`ly: a take waits for it instead of being refused.
Across studio homes (each has its own claims folder) the dataset folder itself is locked too: a
flock on its directory, shared for readers and exclusive for writers, which the kernel keeps per
folder whatever the home (taken after the home's keys and released before them, so a holder of
this home always meets the keys first, with their records' names; a folder held the other way
is then held by another home's process, named by its pid). A folder not there yet (an upload
making it) has no folder lock, and a file system without flock on folders (some network file
systems) keeps to the home's claims. flock is hand-used here as in jobs/homelock.py: the
standard library has it, and no dependency gives reader/writer locks that die with their holder.
No torch, no HTTP.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import stat
import time
import unicodedata
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lorastudio import json_read
from lorastudio.capped_read import read_capped
from lorastudio.errors import DatasetBusy, writing
from lorastudio.file_modes import follow_umask_fd
from lorastudio.jobs.homelock import LOCK_NAME, lock_holders
from lorastudio.processes import process_alive
from lorastudio.staged_files import killed_writers_staging, staging_path

CLAIMS_DIR = "claims"
BRIEF_WAIT_S = 30.0  # how long a take waits for brief edits (and a releasing holder) by default
RETRY_S = 0.02
READ = "read"
WRITE = "write"
HOME_MARKERS = (LOCK_NAME, "lorastudio.db")  # a studio home holds one of these beside datasets/


def claim_root(folder: Path, datasets_dir: Path) -> Path:
    """The dataset `folder` (resolved; a relative one is a name under `datasets_dir`, as in a
    config) belongs to: its top folder under `datasets_dir`, or itself."""
    root = Path(os.path.realpath(datasets_dir))
    folder = Path(os.path.realpath(folder if Path(folder).is_absolute() else root / folder))
    for base in (root, _home_datasets_above(folder)):
        if base is not None and base in folder.parents:
            return base / folder.relative_to(base).parts[0]
    return folder


def _home_datasets_above(folder: Path) -> Path | None:
    """The datasets root of the studio home `folder` lies in (the nearest ancestor named
    "datasets" beside a home's lock file or run store), or None."""
    for parent in folder.parents:
        if parent.name == "datasets" and any((parent.parent / m).is_file() for m in HOME_MARKERS):
            return parent
    return None


def claim_keys(root: Path) -> list[str]:
    """The lock keys of dataset folder `root` (claim_root's): its path, Unicode-normalised (NFC:
    an NFD spelling of the name is the same key), and, when the folder exists, its (st_dev,
    st_ino): on a case- or normalisation-insensitive file system (exFAT, NTFS, APFS mounts)
    `Set` and `set` are one folder, so one inode key, whatever their resolved paths. A folder
    being created has only its path key; the path key is taken beside the inode key, so a
    claim made before the folder existed still meets one made after under the same name."""
    keys = [hashlib.sha256(os.fsencode(unicodedata.normalize("NFC", str(root)))).hexdigest()[:24]]
    try:
        st = os.stat(root)
    except OSError:  # not there yet (an upload or an import making it), or not reachable
        return keys
    return [*keys, hashlib.sha256(f"inode:{st.st_dev}:{st.st_ino}".encode()).hexdigest()[:24]]


class DatasetClaim:
    """Held claims on one or more datasets; `release()` (or the process's end) frees them."""

    def __init__(self) -> None:
        self._held: list[tuple[int, Path, Path]] = []  # (lock fd, holder record, lock file)
        self._folders: list[int] = []  # locked dataset folders (their directory descriptors)
        self.action: str | None = None  # what a refusal says cannot be done (take's `action`)

    @classmethod
    def take(
        cls,
        home: Path,
        datasets_dir: Path,
        folders: Iterable[Path | str],
        mode: str,
        holder: str,
        brief: bool = False,
        wait_s: float = BRIEF_WAIT_S,
        action: str | None = None,
    ) -> DatasetClaim:
        """Claim every dataset of `folders` for `mode` (READ shared, WRITE exclusive) as `holder`
        (said in refusals, e.g. "caption job 1a2b" or "`lorastudio train`"). All or nothing.
        `brief`: a short edit (an upload, a caption edit): others wait for it (up to their
        `wait_s`) instead of being refused. Raises DatasetBusy naming the first dataset held the
        other way by a claim that is not brief (or for longer than `wait_s`), with its holders and
        what cannot be done (`action`, e.g. "it cannot be deleted"; None: a WRITE's "its captions
        cannot be written", a READ's "a run cannot read it")."""
        roots = sorted({claim_root(Path(f), datasets_dir) for f in folders})
        claim = cls()
        claim.action = action  # said in a refusal (RELIABILITY 1998)
        try:
            for root in roots:
                for key in claim_keys(root):
                    claim._take_one(home / CLAIMS_DIR, root, key, mode, holder, brief, wait_s)
            for root in roots:  # host-wide: other studio homes' holders of the same folders
                claim._lock_folder(root, mode, wait_s if brief else 0.0)
        except BaseException:
            claim.release()
            raise
        return claim

    def _take_one(
        self, claims: Path, root: Path, key: str, mode: str, holder: str, brief: bool, wait_s: float
    ) -> None:
        path = claims / f"{key}.lock"
        deadline = time.monotonic() + wait_s
        while True:
            _claims_folder(claims)
            try:
                fd = _open_lock(path)
            except FileNotFoundError:  # a releasing holder removed the empty folder meanwhile
                if time.monotonic() > deadline:
                    raise
                continue
            try:
                fcntl.flock(fd, (fcntl.LOCK_EX if mode == WRITE else fcntl.LOCK_SH) | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                found = holders(path)  # none: its last holder is removing it (records go first)
                if any(not h.get("brief") for h in found) or time.monotonic() > deadline:
                    raise DatasetBusy(_refusal(path, root, mode, self.action)) from None
                time.sleep(RETRY_S)  # brief edits end soon: wait for them
                continue
            except OSError:
                os.close(fd)
                raise
            if _same_file(fd, path):
                break
            os.close(fd)  # locked a file its last holder had just removed: take the new one
        holders(path)  # removes the records that killed holders left
        record = claims / f"{key}.{os.getpid()}-{uuid.uuid4().hex[:8]}.holder"
        info = {"pid": os.getpid(), "mode": mode, "holder": holder, "dataset": str(root), "brief": brief}
        staged = staging_path(record)  # staged_files.py: a killed taker's is removed at a server start
        try:
            with writing(f"the claim on dataset {root.name} could not be recorded", claims):
                staged.write_text(json.dumps(info), encoding="utf-8")
                os.replace(staged, record)
        except BaseException:  # the lock goes with it: a failed take holds nothing
            staged.unlink(missing_ok=True)
            os.close(fd)
            raise
        self._held.append((fd, record, path))

    def _lock_folder(self, root: Path, mode: str, wait_s: float) -> None:
        """Lock dataset folder `root` itself (shared for READ, exclusive for WRITE), waiting up
        to `wait_s` for it. Raises DatasetBusy naming the holding pids. No lock where the folder
        is not there yet or its file system takes no flock on a folder."""
        try:
            fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:  # not made yet (an upload, an import), or not a folder
            return
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, (fcntl.LOCK_EX if mode == WRITE else fcntl.LOCK_SH) | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(RETRY_S)
                    continue
                os.close(fd)
                raise DatasetBusy(_folder_refusal(root, mode, self.action)) from None
            except OSError:  # no flock on folders here (a network file system): the home's claims only
                os.close(fd)
                return
            self._folders.append(fd)
            return

    def release(self) -> None:
        """Free every claim held: the folder locks first (a taker of this home that gets the
        keys then finds the folder free), then each record and its lock; the last holder of a
        dataset also removes the lock file (and the claims folder when empty), so a home keeps
        no trace of a claim. Idempotent."""
        folders, self._folders = self._folders, []
        for fd in folders:
            os.close(fd)  # drops the folder lock
        held, self._held = self._held, []
        for fd, record, path in held:
            record.unlink(missing_ok=True)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # alone: nobody else holds it
                if _same_file(fd, path):
                    path.unlink()
                with contextlib.suppress(OSError):  # not empty: other datasets' claims
                    path.parent.rmdir()
            except OSError:  # others hold it (BlockingIOError) or it is gone: leave it to them
                pass
            os.close(fd)  # drops the lock

    def __enter__(self) -> DatasetClaim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def claim_cli_run(cfg: Any) -> DatasetClaim:
    """Claim the datasets of a CLI `lorastudio train` config `cfg` for reading, on the home of
    the current settings. Raises DatasetBusy naming the dataset and its writer."""
    from lorastudio.config_datasets import read_folders
    from lorastudio.settings import get_settings

    settings = get_settings()
    holder = f"`lorastudio train` ({cfg.output_name or 'a run'})"
    return DatasetClaim.take(
        settings.home, settings.datasets_dir, read_folders(cfg, settings.datasets_dir), READ, holder
    )


def holders(lock: Path) -> list[dict[str, Any]]:
    """The live holders recorded for lock file `lock` ({"pid", "mode", "holder", "dataset"});
    records of processes that hold no lock on it any more are removed (crash leftovers), and so
    is a killed taker's staged record of it, never renamed (staged_files' pid rule: it kept the
    claims folder, RELIABILITY 1282)."""
    for staged in killed_writers_staging(lock.parent):
        if staged.name.startswith(f".{lock.stem}."):
            staged.unlink(missing_ok=True)
    try:
        records = sorted(lock.parent.glob(f"{lock.stem}.*.holder"))
    except FileNotFoundError:  # the last holder removed the claims folder meanwhile: none left
        return []
    live = set(lock_holders(lock))
    found = []
    for record in records:
        try:
            info = _read_record(record)
        except OSError:
            continue  # removed right now, or not a file (left alone)
        if info is None:  # records are renamed in whole: garbage, not one being written
            record.unlink(missing_ok=True)
            continue
        pid = info["pid"]
        if live and pid not in live:  # a holder that locked after `live` was read has it now
            live = set(lock_holders(lock))
        if (pid in live) if live else process_alive(pid):  # no /proc/locks (or no match): by the pid
            found.append(info)
        else:
            record.unlink(missing_ok=True)
    return found


MAX_RECORD_BYTES = 64 * 1024
_RECORD_TYPES = {"pid": int, "mode": str, "holder": str, "dataset": str, "brief": bool}


def _read_record(record: Path) -> dict[str, Any] | None:
    """A holder record's fields, or None when it is garbage (not JSON, over MAX_RECORD_BYTES,
    a field missing or of another type, a pid < 1, a mode other than READ / WRITE).
    Raises OSError when it is gone or not a regular file (a link, a folder, a FIFO planted
    there: opened without following or blocking, never read)."""
    fd = os.open(record, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise IsADirectoryError(f"{record}: not a regular file")
        raw = read_capped(fh, MAX_RECORD_BYTES + 1)
    try:
        info = json_read.loads(raw) if len(raw) <= MAX_RECORD_BYTES else None
    except ValueError:
        return None
    if not isinstance(info, dict) or any(type(info.get(k)) is not t for k, t in _RECORD_TYPES.items()):
        return None
    return info if info["pid"] > 0 and info["mode"] in (READ, WRITE) else None


def _claims_folder(claims: Path) -> None:
    """Make the claims folder. Raises DatasetBusy naming it when a link or a file is there (a
    claim through it would lock files elsewhere)."""
    claims.parent.mkdir(parents=True, exist_ok=True)
    while True:  # the last holder releasing another dataset may remove the empty folder any time
        with contextlib.suppress(FileExistsError):
            os.mkdir(claims)
        try:
            mode = os.lstat(claims).st_mode
        except FileNotFoundError:  # removed between the two calls: make it again
            continue
        if not stat.S_ISDIR(mode):
            raise DatasetBusy(f"{claims} is a link or a file, not the claims folder: remove it, then retry")
        return


def _open_lock(path: Path) -> int:
    """Open (create) lock file `path` without following a link. A link, an empty folder or a
    FIFO planted at its place is removed first (only the entry: never what a link points to).
    Raises DatasetBusy naming it when it cannot be removed (a folder with files)."""
    for _ in range(3):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
        except OSError as err:
            if isinstance(err, FileNotFoundError) or err.errno not in (
                errno.ELOOP,
                errno.EISDIR,
                errno.ENXIO,
            ):
                raise
            _remove_planted(path)
            continue
        if stat.S_ISREG(os.fstat(fd).st_mode):
            follow_umask_fd(fd)  # an older version's 0600 lock (file_modes.py)
            return fd
        os.close(fd)  # a FIFO opened without blocking
        _remove_planted(path)
    raise DatasetBusy(f"{path} is not a lock file and could not be replaced: remove it, then retry")


def _remove_planted(path: Path) -> None:
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            path.rmdir()
        else:
            path.unlink()
    except FileNotFoundError:
        pass
    except OSError as err:
        raise DatasetBusy(f"{path} is not a lock file ({err.strerror}): remove it, then retry") from None


def _refusal(lock: Path, root: Path, wanted: str, action: str | None = None) -> str:
    """Why `wanted` on dataset `root` is refused, naming who holds it and what cannot be done
    (`action`; None: said by `wanted`)."""
    found = holders(lock)
    pids = lock_holders(lock)
    if found:
        who = "; ".join(f"{h['holder']} (pid {h['pid']})" for h in found)
    else:
        who = f"pid {', '.join(map(str, pids))}" if pids else "another lorastudio process"
    held = "in use"
    if found:
        held = "having its captions written" if any(h["mode"] == WRITE for h in found) else "being read"
    action = action or _action(wanted)
    return f"dataset {root.name!r} ({root}) is {held} by {who}; {action} until that ends"


def _action(wanted: str) -> str:
    """What a refused claim of mode `wanted` cannot do, where its taker named nothing."""
    return "its captions cannot be written" if wanted == WRITE else "a run cannot read it"


def _folder_refusal(root: Path, wanted: str, action: str | None = None) -> str:
    """Why `wanted` on dataset folder `root` is refused when the folder itself is locked the other
    way (by a process of another studio home: this home's holders are met at its keys)."""
    pids = lock_holders(root)
    who = f"pid {', '.join(map(str, pids))}" if pids else "a process"
    held = "in use" if wanted == WRITE else "having its captions written"
    action = action or _action(wanted)
    return (
        f"dataset {root.name!r} ({root}) is {held} by {who} of another lorastudio home "
        f"(another LORASTUDIO_HOME); {action} until that ends"
    )


def _same_file(fd: int, path: Path) -> bool:
    """Whether open file `fd` is still the file at `path` (not removed or replaced)."""
    try:
        st, now = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino)
