"""Domain errors. Every error a user can cause is one of these; api/errors.py maps each class
to an HTTP status code in one place, and the CLI prints its message and exits non-zero.

No module raises bare Exception/RuntimeError for a user mistake: pick (or add) a class here.
"""

from __future__ import annotations

import errno
import os
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from lorastudio.io_advice import READ_ADVICE, WRITE_ADVICE


def shown_text(value: str, limit: int = 100) -> str:
    """`value` (a user's text: any length) quoted for a message: the repr of its first `limit`
    characters, and its length where it is longer. Echoed whole, a 100,000-character family or
    base model made a 200 KB refusal (its detail and its problem each held it)."""
    return repr(value[:limit]) + (f" (cut: {len(value):,} characters)" if len(value) > limit else "")


class LorastudioError(Exception):
    """Base of every domain error. `str(err)` is a complete, user-facing message."""


@dataclass(frozen=True)
class FieldProblem:
    """One problem with one setting: `field` is a dotted path ("lora_rank"), `message` says why."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class ConfigError(LorastudioError):
    """A configuration with one or more bad fields. All problems are reported at once, each once
    (a problem found twice, e.g. by two checks or for two copies of one input, is listed once)."""

    def __init__(self, problems: list[FieldProblem]):
        self.problems = list(dict.fromkeys(problems))
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid configuration ({len(self.problems)} problem(s)):\n{lines}")


class UnknownFamily(LorastudioError):
    """A family name that is not registered. The message lists the valid names."""

    def __init__(self, name: str, valid: list[str]):
        self.name = name
        self.valid = list(valid)
        super().__init__(f"unknown model family {shown_text(name)}; valid families: {', '.join(self.valid)}")


class DatasetError(LorastudioError):
    """A dataset that cannot be trained on. `problems` lists each file or fact that is wrong, each
    once (two copies of one file name refused for one reason are one problem), in order."""

    def __init__(self, message: str, problems: list[str] | None = None):
        self.problems = list(dict.fromkeys(problems or []))
        detail = "".join(f"\n  - {p}" for p in self.problems)
        super().__init__(message + detail)


class ModelSourceError(LorastudioError):
    """A base model that cannot be used: missing, incomplete, wrong family or inference-only."""


class PathOutsideRoot(LorastudioError):
    """A user-supplied path that resolves outside the root it must stay under."""


class NotFound(LorastudioError):
    """A named thing (run, dataset, LoRA, image) that does not exist."""


class DatasetNotFound(NotFound):
    """No dataset folder of that name (`dataset`) under the datasets root: every
    /api/datasets/{name}/... route answers it alike (404, the body's `dataset` names it)."""

    def __init__(self, dataset: str, why: str = ""):
        self.dataset = dataset
        super().__init__(f"no dataset named {dataset!r}" + (f": {why}" if why else ""))


class JobActive(LorastudioError):
    """The GPU is busy (a training job or a conflicting workload is active)."""


class DatasetBusy(JobActive):
    """A dataset is claimed the other way by another writer or reader (jobs/dataset_claims.py)."""


class CaptionConflict(LorastudioError):
    """An edit of a caption that changed since the editor read it (another tab, another person):
    `current` is the caption there now ("" for none); nothing was written."""

    def __init__(self, message: str, current: str):
        self.current = current
        super().__init__(message)


class DatasetChanged(LorastudioError):
    """A dataset renamed, deleted or replaced (another tab, person or client) while an upload to
    it was sent: nothing was stored, the upload is refused rather than made a new dataset under
    the old name."""


class TrainingStopped(LorastudioError):
    """Raised inside the engine when a stop request is honoured; carries whether to save."""

    def __init__(self, save: bool):
        self.save = save
        super().__init__("training stopped on request" + (" (saving)" if save else " (discarding)"))


class RunFolderMoved(LorastudioError):
    """A live run's folder was renamed, replaced (by another folder or a link) or removed while
    the run wrote to it (training/resume/folder_guard.py): the write it was about to make, and every
    later one, would land in what is at its path now, so nothing was written there and the run
    fails. `run_dir` is the folder's path."""

    def __init__(self, run_dir: object, detail: str | None = None):
        self.run_dir = str(run_dir)
        why = f" ({detail})" if detail else ""
        super().__init__(
            f"the run folder {self.run_dir} was moved or replaced while the run wrote to it{why}; "
            "nothing written there"
        )


class TrainingDiverged(LorastudioError):
    """The loss or gradients stayed non-finite; no LoRA is written from the diverged weights."""


class ModelAccessDenied(ModelSourceError):
    """A hub repo that exists but cannot be read with the current token (gated, private). `status`
    is the hub's HTTP status (401: no or invalid token, 403: token without access)."""

    def __init__(self, message: str, status: int):
        self.status = status
        super().__init__(message)


class HubUploadError(LorastudioError):
    """A push of a LoRA to the hub that failed: no hub token set, or the hub unreachable or
    failing (the message names the repo and the hub's answer)."""


class HubTokenMissing(HubUploadError):
    """A push with no hub token configured (LORASTUDIO_HF_TOKEN, or huggingface_hub's login)."""


class HubAccessDenied(HubUploadError):
    """The hub refused the push: `status` 401 (token not accepted) or 403 (no write access to
    the repo)."""

    def __init__(self, message: str, status: int):
        self.status = status
        super().__init__(message)


class ModelNotDeletable(LorastudioError):
    """A base model lorastudio did not download or create (it never deletes those)."""


class GenerationFailed(LorastudioError):
    """A generation that failed inside the generation worker for a reason that is not the
    request's fault (an unexpected error of the pipeline)."""


class GenerationWorkerLost(GenerationFailed):
    """The generation worker died during a request (killed, e.g. by the out-of-memory killer,
    crashed) or ran out of memory; the server goes on and the next request starts a fresh one."""


class GenerationTimedOut(GenerationWorkerLost):
    """The generation worker did not answer within the allowance of what the request asked for
    (jobs/worker_allowance.py): it was stopped (SIGTERM, then SIGKILL) as hung, and the next
    request starts a fresh one. The message names what timed out and after how long."""


class GenerationCancelled(LorastudioError):
    """A generation stopped on request (its client cancelled it, or left) before its image was
    kept: between two denoising steps, or before the first. Nothing of it is in the gallery."""


class ServerStopping(LorastudioError):
    """The server is stopping (Ctrl-C, SIGTERM): a generation in flight was stopped (between
    denoising steps, or while it waited for the worker) and nothing of it kept; a new one is
    refused. Send it again once the server is back."""


class _FailedWrite(LorastudioError):
    """A write that failed (NoSpaceLeft, WriteFailed): `path` the file or folder named, if any."""

    path: str | None

    @classmethod
    def from_message(cls, message: str) -> _FailedWrite:
        """The error whose message is `message` (one rebuilt from another process's report)."""
        err = cls.__new__(cls)
        Exception.__init__(err, message)
        err.path = None
        return err


class NoSpaceLeft(_FailedWrite):
    """A write failed because the disk (or the quota) holding `path` is full: ENOSPC/EDQUOT, or
    SQLite's "database or disk is full". The message starts with "no space left on device"."""

    def __init__(self, what: str, path: object = None):
        self.path = None if path is None else str(path)
        where = f" ({self.path})" if self.path else ""
        super().__init__(f"no space left on device: {what}{where}; free some space and retry")


class WriteFailed(_FailedWrite):
    """A write failed for another reason than a full disk (WRITE_FAILED_ERRNOS): the file-size
    limit (EFBIG, RLIMIT_FSIZE or the file system's largest file), a read-only file system, no
    permission, an I/O error. The message names what was written, where, and the system's reason:
    "write failed: <what> (<path>): <reason>" (the file a write() call failed on has no name in
    its OSError, so the writer names it: `writing`)."""

    def __init__(self, what: str, path: object = None, reason: str = "", advice: str = ""):
        self.path = None if path is None else str(path)
        where = f" ({self.path})" if self.path else ""
        then = f"; {advice}" if advice else ""
        super().__init__(f"write failed: {what}{where}: {reason or 'unknown reason'}{then}")


class ReadFailed(LorastudioError):
    """Reading a file that was being copied failed (an upload's or an import's source: an I/O
    error of its disk, a network file system gone, no permission): not a write of the studio's.
    The message names what was read, the system's reason and, for READ_ADVICE's errnos, what to
    do: "read failed: <what>: <reason>[; <advice>]" (API 500, CLI exit 1, as WriteFailed)."""

    def __init__(self, what: str, reason: str = "", advice: str = ""):
        then = f"; {advice}" if advice else ""
        super().__init__(f"read failed: {what}: {reason or 'unknown reason'}{then}")


@contextmanager
def reading(what: str) -> Iterator[None]:
    """Turn a failed read in the block (any OSError) into ReadFailed naming `what` (e.g. "the
    source file /x/a.png could not be read"), raised from the OSError: a copy wraps only its
    reads in it, so its source's read error is never told as a failed write of its target."""
    try:
        yield
    except OSError as err:
        reason = err.strerror or str(err) or type(err).__name__
        raise ReadFailed(what, reason, READ_ADVICE.get(err.errno or 0, "")) from err


def os_error_text(err: OSError) -> str:
    """An OSError as one line: "Read-only file system: PATH" ("... -> PATH2" for a rename)."""
    if err.strerror is None:
        return str(err) or type(err).__name__
    where = "" if err.filename is None else f": {err.filename}"
    where += "" if err.filename2 is None else f" -> {err.filename2}"
    return f"{err.strerror}{where}"


# The write failures that are not a full disk: the file too large, a read-only file system, no
# permission (EACCES, EPERM), an I/O error, a folder the system holds (EBUSY: a mount point, which
# no rename or removal moves). Other OSErrors (ENOENT, EEXIST, ...) are races or refusals a caller
# handles itself, so `writing` lets them through.
WRITE_FAILED_ERRNOS = frozenset({errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.EBUSY})


def _staging_name(filename: object) -> bool:
    """Whether a file an OSError names is a hidden staging file of the studio's writers (its name
    starts with "."): never shown, the writer's `what` names the file the user knows."""
    return filename is not None and os.path.basename(os.fsdecode(filename)).startswith(".")


_OS_ERROR_TEXT = re.compile(r"\(os error (\d+)\)")


def library_os_error(err: BaseException, path: object) -> OSError | None:
    """The OSError a library's error stands for when its text carries the errno as Rust's I/O
    errors print it, "... (os error 27)" (safetensors' SafetensorError: "Error while serializing:
    I/O error: File too large (os error 27)"), for `path`; None when the text names no errno."""
    found = _OS_ERROR_TEXT.search(str(err))
    if found is None:
        return None
    code = int(found.group(1))
    return OSError(code, os.strerror(code), str(path))


# safetensors' text for every file it could not open (FileNotFoundError, no errno), EACCES included
def write_failure(
    err: BaseException, what: str, path: object = None, *, show_file: bool = True
) -> LorastudioError | None:
    """The domain error of a failed write of `what` into `path`: NoSpaceLeft (507) for a full disk
    (`is_no_space`), WriteFailed (500) for WRITE_FAILED_ERRNOS (its reason the system's words,
    and with `show_file` the file(s) the OSError names when other than `path` and not a hidden
    staging file (a name starting with "."), then what to do: WRITE_ADVICE); None for anything
    else."""
    if is_no_space(err):
        return NoSpaceLeft(what, path)
    if isinstance(err, OSError) and err.errno in WRITE_FAILED_ERRNOS:
        shown = (
            show_file
            and err.filename is not None
            and str(err.filename) != str(path)
            and not _staging_name(err.filename)
            and not _staging_name(err.filename2)
        )
        reason = os_error_text(err) if shown else err.strerror or str(err)
        return WriteFailed(what, path, reason, WRITE_ADVICE.get(err.errno or 0, ""))
    return None


@contextmanager
def writing(what: str, path: object = None, *, show_file: bool = True) -> Iterator[None]:
    """Turn a failed write in the block into the domain error naming `what` and `path`
    (`write_failure`: NoSpaceLeft, WriteFailed), raised from the OSError; any other exception
    passes unchanged. Every writer of the studio's files wraps its writes in it, so a full disk,
    a file-size limit or a read-only folder is one clear error (an API 507 / 500 with the JSON
    body, a CLI "error:" line and a non-zero exit) rather than an unnamed OSError."""
    try:
        yield
    except (OSError, sqlite3.Error) as err:
        failure = write_failure(err, what, path, show_file=show_file)
        if failure is None:
            raise
        raise failure from err


class HostMemoryShort(LorastudioError):
    """A run refused before loading any model: its forecast peak host RAM (jobs/host_memory.py)
    exceeds the memory available to it. The message names both and the settings that lower it."""

    def __init__(self, message: str, *, forecast_gb: float, available_gb: float):
        self.forecast_gb = forecast_gb
        self.available_gb = available_gb
        super().__init__(message)


class HomeInUse(LorastudioError):
    """The studio home is owned by another live lorastudio process (one server per home)."""


class StoreUnreadable(LorastudioError):
    """The run database cannot be opened or read (not a SQLite file, a folder in its place, no
    permission, a damaged page): the CLI's readers (`runs list|show`) say so, naming the file,
    instead of a sqlite3 traceback."""


class CacheError(LorastudioError):
    """The on-disk encode cache (data/disk_cache.py) cannot be used or cleared as asked: a link,
    a file or something the cache did not write where its folders or shards go; `problems`
    name each path."""

    def __init__(self, message: str, problems: list[str]):
        self.problems = problems
        super().__init__(message + "".join(f"\n  - {p}" for p in problems))


_NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_SQLITE_FULL = 13  # sqlite3's SQLITE_FULL result code


def is_no_space(err: BaseException | None) -> bool:
    """Whether `err` (or an exception it was raised from) says the disk is full: an OSError
    with ENOSPC/EDQUOT, a sqlite3 error with SQLITE_FULL, or a NoSpaceLeft."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, NoSpaceLeft):
            return True
        if isinstance(err, OSError) and err.errno in _NO_SPACE_ERRNOS:
            return True
        if isinstance(err, sqlite3.Error) and (
            getattr(err, "sqlite_errorcode", None) == _SQLITE_FULL or "database or disk is full" in str(err)
        ):
            return True
        err = err.__cause__ or err.__context__
    return False
