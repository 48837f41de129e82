"""The Hugging Face hub as lorastudio sees it: endpoint, offline mode, and the hub cache already
on disk (huggingface_hub's HF_HUB_CACHE, shared with every other tool; lorastudio only reads it).

The endpoint and cache folder are read from the environment at call time (HF_ENDPOINT,
HF_HUB_CACHE / HF_HOME, by huggingface_hub's rule), never from huggingface_hub.constants, which
holds the values of the moment it was imported; offline mode is
huggingface_hub's (HF_HUB_OFFLINE, read when it was imported), since that is what its client obeys.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

# owner/name as huggingface_hub's validate_repo_id accepts it (ASCII only): each part 1-96 of
# [A-Za-z0-9_.-], starting with a letter or digit and ending with a letter, digit or '_'
_PART = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
HUB_ID = re.compile(rf"{_PART}/{_PART}")  # used with fullmatch: '$' let a trailing newline in
COMMIT = re.compile(r"[0-9a-f]{40}")  # fullmatch
log = logging.getLogger(__name__)
DEFAULT_ENDPOINT = "https://huggingface.co"  # huggingface_hub's own default (constants._HF_DEFAULT_ENDPOINT)


def is_hub_id(value: str) -> bool:
    """True for the shape of a hub repo id: owner/name as huggingface_hub accepts it (HUB_ID; no
    '..', no '--', no '.git' end, nothing after the name: a trailing newline was accepted and
    huggingface_hub's own check of such an id raised past every handler, a 500)."""
    return (
        bool(HUB_ID.fullmatch(value))
        and ".." not in value
        and "--" not in value
        and not value.endswith(".git")
    )


def hub_offline() -> bool:
    """True when huggingface_hub runs in offline mode (HF_HUB_OFFLINE=1): only disk is used."""
    from huggingface_hub import constants

    return bool(constants.is_offline_mode())


def hub_endpoint() -> str:
    """The hub's base URL: $HF_ENDPOINT now, else huggingface_hub's default, DEFAULT_ENDPOINT
    (not `huggingface_hub.constants.ENDPOINT`: the variable as it was at its import). For the
    client only: a message names `shown_endpoint()`."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


# a URL's user and password (`https://user:secret@mirror.corp/...`: a hub mirror behind basic
# auth, a proxy's URL): what comes between "scheme://" and "@" before the host
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/@?#]+@")


def hide_userinfo(text: str) -> str:
    """`text` with the credentials of every URL in it shown as `***` (`https://***@host/...`)."""
    return _USERINFO.sub(r"\1***@", text)


def shown_endpoint() -> str:
    """hub_endpoint() as a message names it: without the credentials an HF_ENDPOINT may carry
    (RELIABILITY 785)."""
    return hide_userinfo(hub_endpoint())


def hub_cache_dir() -> Path:
    """The hub cache folder, by huggingface_hub's own rule read from the environment now:
    $HF_HUB_CACHE, else the legacy $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else
    $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.

    Not `huggingface_hub.constants.HF_HUB_CACHE`: that is read once, when huggingface_hub is
    first imported, so a process that changes the variables later (a test, an embedding app)
    would keep listing and fetching into the folder of the moment of that import."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return _expand(explicit)
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
    )
    return _expand(home) / "hub"


def _expand(path: str) -> Path:
    """`~` and $VARS expanded, as huggingface_hub does."""
    return Path(os.path.expandvars(os.path.expanduser(path)))


def repo_storage(repo_id: str, cache_dir: Path | None = None) -> Path:
    """The cache folder of model repo `repo_id` (models--owner--name)."""
    return (cache_dir or hub_cache_dir()) / ("models--" + repo_id.replace("/", "--"))


def cached_snapshot(repo_id: str, revision: str | None = None, cache_dir: Path | None = None) -> Path | None:
    """The cached snapshot folder of `repo_id` at `revision` (branch, tag or commit; default
    main), or None when that revision is not in the cache. Only reads."""
    storage = repo_storage(repo_id, cache_dir)
    rev = revision or "main"
    commit: str | None = rev if COMMIT.fullmatch(rev) else None
    if commit is None:
        from lorastudio.basemodels.hubscan import RepoDamaged, read_ref

        try:  # bounded: a FIFO or a /dev/zero link as a ref is refused, never read (hubscan)
            commit = read_ref(storage / "refs" / rev)
        except (OSError, RepoDamaged):
            return None
    snapshot = storage / "snapshots" / commit
    return snapshot if snapshot.is_dir() else None


def ref_damage(repo_id: str, revision: str | None = None, cache_dir: Path | None = None) -> str | None:
    """Why the hub cache's ref of `repo_id` at `revision` (default main) must not be handed to
    huggingface_hub, or None when there is none or it holds a commit (a commit revision has no ref).
    huggingface_hub's own readers (try_to_load_from_cache, hf_hub_download) read a ref whole,
    following links: a sparse terabyte or a /dev/zero link there is read until memory runs out,
    a FIFO blocks. This reads it bounded (hubscan.read_ref). Only reads."""
    rev = revision or "main"
    if COMMIT.fullmatch(rev):
        return None
    from lorastudio.basemodels.hubscan import RepoDamaged, read_ref

    path = repo_storage(repo_id, cache_dir) / "refs" / rev
    try:
        read_ref(path)
    except FileNotFoundError:
        return None
    except RepoDamaged as err:
        return f"{path}: {err}"
    except OSError as err:  # a link (O_NOFOLLOW: ELOOP), a folder, no permission
        return f"{path}: cannot be read as a ref ({err.strerror or err})"
    return None


@dataclass(frozen=True)
class CachedRepo:
    """A model repo in the hub cache: its id, the snapshot lorastudio shows (the one `main`
    points to, else the newest), that snapshot's commit and its bytes on disk."""

    repo_id: str
    snapshot: Path
    commit: str
    size_bytes: int


def cached_repos(cache_dir: Path | None = None) -> list[CachedRepo]:
    """Every model repo in the hub cache, by id. Empty when there is no cache folder. Bounded in
    time and memory whatever the cache holds (basemodels/hubscan.py: FIFO or /dev/zero refs, link
    loops, deep trees); a repo it skips is logged with the reason, once per reason."""
    from lorastudio.basemodels.hubscan import scan_hub_cache

    scan = scan_hub_cache(cache_dir or hub_cache_dir())
    for note in scan.notes:
        if note not in _noted:
            _noted.add(note)
            log.warning("%s", note)
    found = []
    for repo_id, revisions in scan.repos.items():
        best = max(revisions, key=lambda r: ("main" in r.refs, r.last_modified))
        found.append(CachedRepo(repo_id, best.path, best.commit, best.size_bytes))
    return sorted(found, key=lambda r: r.repo_id.lower())


_noted: set[str] = set()  # the skip notes already logged (GET /api/models lists on every call)


def hub_transport_errors() -> tuple[type[Exception], ...]:
    """The HTTPError classes of the HTTP client huggingface_hub raises through (its connection
    errors, timeouts and bad URLs are not OSErrors): httpx2 from huggingface_hub 2.0 on, httpx
    before (1.x, which pyproject's floor allows). Each one that imports, so a handler catches the
    transport failures of whichever huggingface_hub is installed; an import of httpx2 alone raised
    ModuleNotFoundError at every hub call on huggingface_hub 1.x (RELIABILITY 1201)."""
    errors: list[type[Exception]] = []
    for name in ("httpx2", "httpx"):
        try:
            client = importlib.import_module(name)
        except ModuleNotFoundError:  # not installed: huggingface_hub cannot be raising through it
            continue
        errors.append(client.HTTPError)
    return tuple(errors)
