"""The modes of the studio's own shared files in a home an older lorastudio made. No torch.

Since fix 901 every file the studio makes is created 0666 and every folder 0777, less the umask,
so that a group sharing a home (setgid folder, umask 002) can use it. A home made before that
keeps what the older code gave: the home's and the added list's lock files 0600, the database
0644, the cache's folders 0755 (session 30 upgrade audit, RELIABILITY 940): after the upgrade a
second member's every command still ended "Permission denied: .../lorastudio.lock".
`follow_umask_fd` (at each open of such a file) and `follow_umask_path` give such a file the bits
the umask grants that it lacks, where this process owns it (only the owner may change a mode:
the owner's first command of this version mends the home). A mode is never narrowed; another
user's file is left as it is.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path


def process_umask() -> int:
    """This process's umask, read without changing it (Linux: /proc/self/status; elsewhere the
    common 0o022). os.umask would set it process-wide for a moment, racing other threads."""
    try:
        # errors: its Name line holds the process's own name, any bytes (RELIABILITY 1031)
        lines = Path("/proc/self/status").read_text(encoding="utf-8", errors="replace").splitlines()
        return next((int(line.split()[1], 8) for line in lines if line.startswith("Umask:")), 0o022)
    except (OSError, ValueError, IndexError):
        return 0o022


def _wanted(mode: int) -> int | None:
    """The bits a file (0666) or folder (0777) of `mode` should have under the umask, or None
    for anything else (a link, a device)."""
    if stat.S_ISREG(mode):
        return 0o666 & ~process_umask()
    if stat.S_ISDIR(mode):
        return 0o777 & ~process_umask()
    return None


def follow_umask_fd(fd: int) -> None:
    """Add to the open file `fd` the permission bits the umask grants that it lacks, if this
    process owns it (a lock file an older version made 0600). Failures are ignored: a file
    system without modes, a read-only one."""
    with contextlib.suppress(OSError):
        info = os.fstat(fd)
        want = _wanted(info.st_mode)
        if want is not None and info.st_uid == os.geteuid() and info.st_mode & want != want:
            os.fchmod(fd, stat.S_IMODE(info.st_mode) | want)


def follow_umask_path(path: Path | str) -> None:
    """`follow_umask_fd` for a file or folder by its path (not followed if it is a link); a
    missing path is left missing."""
    with contextlib.suppress(OSError):
        info = os.lstat(path)
        want = _wanted(info.st_mode)
        if want is not None and info.st_uid == os.geteuid() and info.st_mode & want != want:
            os.chmod(path, stat.S_IMODE(info.st_mode) | want)


MENDED_MARK = ".modes-umask"  # in a mended folder: the umask its files were mended for (octal)


def _has_wanted(path: Path) -> bool:
    """Whether `path` has the bits the umask grants (a missing path, a link: nothing to do)."""
    try:
        info = os.lstat(path)
    except OSError:
        return True
    want = _wanted(info.st_mode)
    return want is None or info.st_mode & want == want


def mend_once(folder: Path, paths: Callable[[], Iterable[Path]]) -> None:
    """Give each of `paths()` (the studio's shared files and folders under `folder`, an older
    version's among them) the bits this umask grants, once per umask: `folder`/MENDED_MARK
    records the umask after a pass that left every path with them (a pass by a user who owns
    only some of them leaves no mark: the owner's next command mends the rest). Failures are
    ignored (a read-only home is used as it is)."""
    umask = f"{process_umask():o}"
    mark = folder / MENDED_MARK
    with contextlib.suppress(OSError, UnicodeDecodeError):
        if mark.read_text(encoding="utf-8").strip() == umask:
            return
    every = True
    for path in paths():
        follow_umask_path(path)
        every = _has_wanted(path) and every
    if every:
        with contextlib.suppress(OSError):
            fd = os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
            try:
                follow_umask_fd(fd)
                os.write(fd, f"{umask}\n".encode())
            finally:
                os.close(fd)


def home_shared_files(home: Path) -> Iterator[Path]:
    """The files and folders of a studio home that another member of its group must write or
    read, that an older lorastudio made narrower than its umask: the home's lock files, the
    datasets' claims and lock folders and files, each checkpoint's folder and files (safetensors wrote them
    0600). The database: jobs/store.py; the encode cache: data/cache_io.py."""
    yield home / "lorastudio.lock"
    yield home / ".added_models.lock"
    claims = home / "claims"  # the datasets' claims (jobs/dataset_claims.py)
    yield claims
    with contextlib.suppress(OSError):
        yield from claims.iterdir()
    locks = home / "datasets" / ".locks"
    yield locks
    with contextlib.suppress(OSError):
        yield from locks.iterdir()
    with contextlib.suppress(OSError):
        for checkpoints in (home / "outputs").glob("*/checkpoints"):
            for checkpoint in checkpoints.iterdir():
                yield checkpoint
                with contextlib.suppress(OSError):
                    yield from checkpoint.iterdir()


def cache_shared_files(root: Path) -> Iterator[Path]:
    """The encode cache's folders and lock files (`root`: the cache folder): an older version
    made its folders 0755. Its shards are only read by another member (0644 will do)."""
    with contextlib.suppress(OSError):
        for folder, _, names in os.walk(root):
            yield Path(folder)
            for name in names:
                if name.startswith(".") and not name.startswith(".modes"):
                    yield Path(folder) / name
