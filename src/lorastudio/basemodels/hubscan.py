"""A bounded listing of the hub cache's model repos (HF_HUB_CACHE, shared with every tool).

Our own walk, not huggingface_hub's `scan_cache_dir`: that reads each repo's `refs/*` with a
plain read (a FIFO ref held the caller forever; a ref linked to /dev/zero read until the
out-of-memory kill) and globs snapshots with `**` (a folder link loop, a deep tree). Vetting the
cache first and then handing it to scan_cache_dir would leave a window in which a vetted ref is
swapped for a FIFO; walking it ourselves bounds every step:

- a ref is opened only when its folder entry is a regular file (a FIFO, a device, a link is
  never opened), then O_NONBLOCK | O_NOFOLLOW (swapped for a FIFO meanwhile: the open does not
  block; for a link: refused before any read), must still be a regular file of at most
  MAX_REF_BYTES, and is read to at most that; its text must be a 40-hex commit; the refs folder
  is never a link followed (to / ...);
- a snapshot is walked with os.scandir without following folder links (no loop), at most
  MAX_DEPTH folders deep and MAX_ENTRIES entries a repo; a file link is followed by stat only
  (never opened), so a FIFO, a device or /dev/zero counts as no bytes and a loop or a missing blob
  as a note;
- a repo that cannot be listed (an unreadable folder, too many entries, too deep) is skipped
  with its reason in `notes`; a repo without a snapshot is left out; an absent cache folder is
  an empty listing. Nothing of the cache's content raises past `scan_hub_cache`.

The result has what lorastudio shows: per repo, the snapshot `main` points to (else the newest:
its blobs' latest mtime, as huggingface_hub dates a revision), its commit and its blobs' bytes
(each blob once). No torch, no huggingface_hub.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

COMMIT = re.compile(r"[0-9a-f]{40}")  # fullmatch
MAX_REF_BYTES = 1024  # a ref holds one commit hash (40 bytes)
MAX_REFS = 256  # refs a repo may have (branches, tags, refs/pr/N)
MAX_DEPTH = 32  # folder levels inside a snapshot (real repos: 2-3)
MAX_ENTRIES = 200_000  # entries walked in one repo (its snapshots, refs and folders together)


class RepoDamaged(Exception):
    """A repo folder that cannot be listed: the message says why (the caller adds the repo)."""


@dataclass(frozen=True)
class ScannedRevision:
    """One snapshot folder of a repo: its commit, path, refs naming it, bytes and date."""

    commit: str
    path: Path
    refs: frozenset[str]
    size_bytes: int
    last_modified: float


@dataclass
class HubScan:
    """The model repos found (repo id -> its revisions) and one note per thing skipped."""

    repos: dict[str, list[ScannedRevision]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def read_ref(path: Path) -> str:
    """The commit a ref file names. Raises OSError when it cannot be opened (a link: ELOOP,
    missing: FileNotFoundError) and RepoDamaged when it is no regular file, larger than
    MAX_REF_BYTES or not a 40-hex commit. Never blocks, never reads more than MAX_REF_BYTES + 1."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RepoDamaged(f"ref {path.name!r} is not a regular file")
        if info.st_size > MAX_REF_BYTES:
            raise RepoDamaged(f"ref {path.name!r} is {info.st_size} bytes (a ref holds one commit)")
        data = os.read(fd, MAX_REF_BYTES + 1)
    finally:
        os.close(fd)
    text = data.decode("ascii", errors="replace").strip()
    if len(data) > MAX_REF_BYTES or not COMMIT.fullmatch(text):
        raise RepoDamaged(f"ref {path.name!r} does not hold a commit hash")
    return text


class _Budget:
    """The entries one repo's walk may still visit."""

    def __init__(self) -> None:
        self.left = MAX_ENTRIES

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise RepoDamaged(f"it has more than {MAX_ENTRIES} entries")


def _refs(folder: Path, budget: _Budget, notes: list[str], repo: str) -> dict[str, set[str]]:
    """commit -> ref names (refs/main, refs/pr/1 as "pr/1"); a bad ref is a note, not the repo's end."""
    found: dict[str, set[str]] = {}
    stack: list[tuple[Path, str, int]] = [(folder, "", 0)]
    count = 0
    while stack:
        where, prefix, depth = stack.pop()
        try:
            if where.is_symlink():  # a ref folder is the hub's own, never a link (to / ...)
                raise RepoDamaged(f"refs folder {prefix or 'refs'!r} is a link")
            with os.scandir(where) as listing:
                entries = list(listing)
        except FileNotFoundError:
            continue
        except (OSError, RepoDamaged) as err:  # a FIFO, a file, a link: its refs are unknown
            notes.append(f"hub cache {repo}: refs {prefix or '/'!r} not read ({_why(err)})")
            continue
        for entry in entries:
            budget.spend()
            name = prefix + entry.name
            if entry.is_dir(follow_symlinks=False):
                if depth < 4:
                    stack.append((Path(entry.path), name + "/", depth + 1))
                continue
            if not entry.is_file(follow_symlinks=False):  # a FIFO, a device, a link: never opened
                notes.append(f"hub cache {repo}: ref {name!r} skipped (not a regular file)")
                continue
            count += 1
            if count > MAX_REFS:
                notes.append(f"hub cache {repo}: more than {MAX_REFS} refs; the rest not read")
                return found
            try:
                commit = read_ref(Path(entry.path))
            except (OSError, RepoDamaged) as err:
                notes.append(f"hub cache {repo}: ref {name!r} skipped ({_why(err)})")
                continue
            found.setdefault(commit, set()).add(name)
    return found


def _revision(path: Path, refs: frozenset[str], budget: _Budget) -> ScannedRevision:
    """The bytes and date of one snapshot folder, walked without following folder links."""
    blobs: dict[tuple[int, int], tuple[int, float]] = {}
    stack = [(path, 0)]
    while stack:
        where, depth = stack.pop()
        with os.scandir(where) as listing:
            entries = list(listing)
        for entry in entries:
            budget.spend()
            if entry.is_dir(follow_symlinks=False):
                if depth >= MAX_DEPTH:
                    raise RepoDamaged(f"its snapshot is more than {MAX_DEPTH} folders deep")
                stack.append((Path(entry.path), depth + 1))
                continue
            try:
                info = os.stat(entry.path)  # follows a blob link; never opens it
            except OSError:
                continue  # a link to a missing blob or a loop: that file is not on disk
            if stat.S_ISREG(info.st_mode):
                blobs[(info.st_dev, info.st_ino)] = (info.st_size, info.st_mtime)
    size = sum(s for s, _ in blobs.values())
    when = max((m for _, m in blobs.values()), default=None)
    if when is None:
        when = os.stat(path).st_mtime
    return ScannedRevision(path.name, path, refs, size, when)


def _scan_repo(folder: Path, repo: str, notes: list[str]) -> list[ScannedRevision]:
    budget = _Budget()
    refs = _refs(folder / "refs", budget, notes, repo)
    snapshots = folder / "snapshots"
    try:
        with os.scandir(snapshots) as listing:
            entries = list(listing)
    except FileNotFoundError:
        return []
    revisions = []
    for entry in entries:
        budget.spend()
        if not COMMIT.fullmatch(entry.name) or not entry.is_dir(follow_symlinks=False):
            continue
        names = frozenset(refs.get(entry.name, ()))
        revisions.append(_revision(Path(entry.path), names, budget))
    return revisions


def scan_hub_cache(folder: Path) -> HubScan:
    """Every model repo (`models--owner--name`) under the hub cache `folder`, bounded as the
    module says. A missing folder is an empty scan; a damaged repo is left out with a note."""
    scan = HubScan()
    try:
        with os.scandir(folder) as listing:
            entries = sorted(listing, key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return scan
    for entry in entries:
        if not entry.name.startswith("models--"):
            continue
        repo = entry.name[len("models--") :].replace("--", "/")  # as huggingface_hub names it
        if "/" not in repo:
            continue
        try:
            if not entry.is_dir():  # a repo folder may be a link to another disk
                continue
            revisions = _scan_repo(Path(entry.path), repo, scan.notes)
        except (OSError, RepoDamaged) as err:
            scan.notes.append(f"hub cache {repo}: skipped ({_why(err)})")
            continue
        if revisions:
            scan.repos[repo] = revisions
    return scan


def _why(err: BaseException) -> str:
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return str(err) or type(err).__name__
