"""One fetch of a model folder at a time across processes: a server, another server on the same
home and `lorastudio models fetch` all download into the same staging folder
(`models/.<name>.fetching`), so two at once wrote into each other's files, the first renamed the
folder from under the second (which failed with "cannot reach the hub ... FileNotFoundError" and
left a staging folder behind).

`FetchLock(target, repo_id)` takes an exclusive, non-blocking flock on `models/.<name>.fetch-lock`
(a hidden file the catalogue never lists; the kernel drops the lock when its holder exits, kill -9
included) or raises JobActive. No torch.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from lorastudio.errors import JobActive
from lorastudio.file_modes import follow_umask_fd


def lock_path(target: Path) -> Path:
    """The lock file of a fetch into the models/ folder `target`."""
    return target.with_name(f".{target.name}.fetch-lock")


class FetchLock:
    """An exclusive hold on fetching into `target` (see the module docstring); `release()` (or
    the end of a `with` block) gives it back. Raises JobActive when another process (or another
    FetchLock of this one) holds it."""

    def __init__(self, target: Path, repo_id: str):
        path = lock_path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666)
        follow_umask_fd(self._fd)  # an older version's 0600 lock (file_modes.py)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            self._fd = None
            raise JobActive(
                f"{repo_id} is being fetched already by another process (a server or `lorastudio models "
                "fetch`); wait for it to end"
            ) from None

    def release(self) -> None:
        """Give the hold back (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor of the open file drops its flock
            self._fd = None

    def __enter__(self) -> FetchLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
