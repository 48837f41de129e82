"""One owner per studio home: an advisory lock (flock) on `<home>/lorastudio.lock`.

A server holds it exclusively for its whole life, with its pid and port written in the file, so
a second server on the same home is refused with a message naming the first. A CLI `train`
(and a CLI `datasets caption`) holds it shared while it runs: it is refused while a server owns the home (whose job service,
store and start-up cleanup assume no other writer), several CLI runs may share a home, and a
server does not start while one runs. A CLI command that changes the home's files with nothing
beside it (`datasets delete|rename|captions`, `cache clear|prune`) holds it exclusively, recorded
as that command (`for_command`). The kernel drops the lock when its holder dies (kill -9
included), so a crashed server never leaves the home locked; a stale pid in the file means
nothing. No torch, no HTTP.

The file also carries the home's `epoch` (RELIABILITY 1182): a random token each exclusive holder
of this version carries over from the file as it found it (a fresh one where the file holds
none) and leaves there when it lets go (a server's release empties the file but for it). A
server or command of a version before this one rewrites the file without it, so the next start
of this version begins a new epoch: what a server recorded under another epoch (jobs/
generation_records.py) may have been overtaken by an older server that kept no records.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Any

from lorastudio import json_read
from lorastudio.capped_read import read_small_file
from lorastudio.errors import HomeInUse
from lorastudio.file_modes import follow_umask_fd, home_shared_files, mend_once
from lorastudio.user_paths import owner_note

LOCK_NAME = "lorastudio.lock"
TRAIN_THROUGH = "train through it (web UI or POST /api/train/start"
_EPOCH = re.compile(r"^[0-9a-f]{32}$")
_MAX_LOCK_BYTES = 4096  # a holder's few fields


class HomeLock:
    """A held lock on a studio home; `release()` (or the process's end) frees it."""

    def __init__(self, path: Path, fd: int, exclusive: bool, epoch: str | None = None):
        self.path = path
        self.exclusive = exclusive
        self.epoch = epoch  # the home's epoch (module docstring); None: a shared holder's
        self._fd: int | None = fd

    @classmethod
    def for_server(cls, home: Path, port: int | None) -> HomeLock:
        """Take `home` exclusively for a server listening on `port` (None: not known, e.g. an
        app served by a test harness). Raises HomeInUse naming the holder."""
        path, fd = cls._take_fd(home, exclusive=True)
        return cls._recorded(path, fd, {"pid": os.getpid(), "port": port, "kind": "server"})

    @classmethod
    def for_command(cls, home: Path, command: str) -> HomeLock:
        """Take `home` exclusively for the CLI command `command` ("datasets delete", "cache clear":
        one that changes the home's files with no server or run beside it), recorded as that
        command, so that whoever is refused meanwhile is told which command holds the home (they
        were told "a lorastudio server (pid N, an unknown port)" and sent to http://...:None/).
        Raises HomeInUse naming the holder."""
        path, fd = cls._take_fd(home, exclusive=True, asker=command)
        return cls._recorded(path, fd, {"pid": os.getpid(), "kind": "command", "command": command})

    @classmethod
    def _recorded(cls, path: Path, fd: int, info: dict[str, Any]) -> HomeLock:
        """The exclusive lock on `fd` with `info` written in its file, and the home's epoch carried
        over from what the file held (a fresh one where it held none) (the lock freed on failure)."""
        try:
            epoch = _epoch_in(os.pread(fd, _MAX_LOCK_BYTES + 1, 0)) or secrets.token_hex(16)
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps({**info, "epoch": epoch}) + "\n").encode(), 0)
        except OSError:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            raise
        return cls(path, fd, exclusive=True, epoch=epoch)

    @classmethod
    def for_cli_run(cls, home: Path, through: str = TRAIN_THROUGH) -> HomeLock:
        """Share `home` with other CLI commands for a `lorastudio train` (or `datasets caption`)
        in this process. Raises HomeInUse while a server owns it, saying to use the server for
        it (`through`: "<verb> through it (<how>)", the port's URL follows)."""
        return cls(*cls._take_fd(home, exclusive=False, through=through), exclusive=False)

    @staticmethod
    def _take_fd(
        home: Path, exclusive: bool, through: str = TRAIN_THROUGH, asker: str | None = None
    ) -> tuple[Path, int]:
        """(lock file, its descriptor, locked shared or exclusive). Raises HomeInUse worded for
        `asker` (a CLI command's name; None: a server, or the shared `through` command)."""
        home.mkdir(parents=True, exist_ok=True)
        path = home / LOCK_NAME
        try:  # the umask decides the mode (a shared home); a link there is never followed
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666)
        except PermissionError as err:  # a home another uid made (a container's volume): say whose
            raise PermissionError(
                err.errno, f"{err.strerror}{owner_note(path) or owner_note(home)}", str(path)
            ) from err
        except OSError as err:  # ELOOP: a link; EISDIR: a folder
            raise _not_a_lock_file(path, err.errno) from err
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO ("Illegal seek" at the first read)
            os.close(fd)
            raise _not_a_lock_file(path, errno.EINVAL)
        follow_umask_fd(fd)  # an older version's 0600 lock (file_modes.py)
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise HomeInUse(_held_message(home, path, exclusive, through, asker)) from None
        except OSError:
            os.close(fd)
            raise
        mend_once(home, lambda: home_shared_files(home))  # an older version's 0600 locks and checkpoints
        return path, fd

    def release(self) -> None:
        """Free the lock (an exclusive holder empties the file first, but for the home's epoch).
        Idempotent."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            if self.exclusive:
                os.ftruncate(fd, 0)
                if self.epoch is not None:
                    os.pwrite(fd, (json.dumps({"epoch": self.epoch}) + "\n").encode(), 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def __enter__(self) -> HomeLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def holder_info(path: Path) -> dict[str, Any] | None:
    """The holder recorded in lock file `path` (a server's {"pid", "port", "kind": "server"}, a
    command's {"pid", "kind": "command", "command"}); None if none is."""
    try:
        info = json_read.loads(path.read_text(encoding="utf-8") or "null")
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and isinstance(info.get("pid"), int) else None


def _not_a_lock_file(path: Path, code: int | None) -> OSError:
    """The error for a lock file's place holding something else (RELIABILITY 1248): a link was
    followed and its target overwritten with the holder's fields and emptied at release; a FIFO
    failed as "Illegal seek", a folder as "Is a directory", naming nothing."""
    why = "the home's lock file is not a regular file (a link, a FIFO or a folder in its place): remove it"
    return OSError(code or errno.EINVAL, why, str(path))


def home_epoch(home: Path) -> str | None:
    """The epoch `home`'s lock file names (module docstring); None where it names none (no lock
    file, an older version's, a file not the studio's)."""
    return _epoch_in(read_small_file(home / LOCK_NAME, _MAX_LOCK_BYTES) or b"")


def _epoch_in(data: bytes) -> str | None:
    """The epoch in a lock file's bytes `data`; None when there is none or they are not one."""
    if len(data) > _MAX_LOCK_BYTES:
        return None
    try:
        info = json_read.loads(data.decode("utf-8") or "null")
    except ValueError:  # UnicodeDecodeError included
        return None
    epoch = info.get("epoch") if isinstance(info, dict) else None
    return epoch if isinstance(epoch, str) and _EPOCH.match(epoch) else None


def lock_holders(path: Path) -> list[int]:
    """Pids holding a flock on `path`, from /proc/locks (Linux; [] elsewhere or unknown)."""
    try:
        st = path.stat()
        lines = Path("/proc/locks").read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    for line in lines:
        fields = line.split()
        if "FLOCK" in fields and "->" not in fields and len(fields) >= 6 and fields[5] == key:
            with contextlib.suppress(ValueError):
                pids.append(int(fields[4]))
    return sorted(set(pids))


def _held_message(
    home: Path, path: Path, wanted_exclusive: bool, through: str, asker: str | None = None
) -> str:
    info = holder_info(path)
    holders = lock_holders(path)
    if info is not None and (not holders or info["pid"] in holders):
        if info.get("kind") == "command":  # a CLI command that needs the home to itself, briefly
            return (
                f"the studio home {home} is in use by `lorastudio {info.get('command')}` (pid {info['pid']}), "
                "which needs it to itself; try again once it has ended"
            )
        port = info.get("port")
        known = isinstance(port, int)
        at = f"port {port}" if known else "an unknown port"
        url = f" on http://127.0.0.1:{port}/" if known else ""
        owner = f"a lorastudio server (pid {info['pid']}, {at}) owns the studio home {home}"
        if wanted_exclusive and asker is None:
            return f"{owner}; only one server may use a home. Use that server, or stop it first."
        if wanted_exclusive:
            return f"{owner}; `lorastudio {asker}` needs the home to itself: use that server (web UI{url}), or stop it first."
        return f"{owner}; {through}{url}) or give this command another home (LORASTUDIO_HOME=...)"
    pids = ", ".join(str(p) for p in holders) or "unknown"
    then = "a server starts" if asker is None else f"`lorastudio {asker}` can run"
    return (
        f"the studio home {home} is in use by a `lorastudio train` run (pid {pids}; or a "
        f"`lorastudio datasets caption`); {then} once it has ended, or use another home (LORASTUDIO_HOME=...)"
    )
