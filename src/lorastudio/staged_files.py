"""The staging names of lorastudio's single-file writers, and the one rule that tells a killed
writer's staging file from a live one's. No torch, no HTTP.

A single-file writer writes `.<name>.<pid>-<hex>.<kind>` beside its target (`staging_path`: the
writer's pid, a fresh id, the kind of staging) and renames it over the target. A kill -9 (or a
power cut) between the two leaves the staging file, and nothing else ever writes that name. The
rule (`killed_writers_staging`): such a file is a leftover once the pid its name carries runs no
process (processes.process_alive); while that pid runs it is kept (its writer's, or a reused pid's:
kept too, which is safe). Only a regular file is taken: never a link (nor what it points to), a
folder or anything else; the user's folder is removed from through its descriptor.

Who stages this way, and who removes their leftovers:
- In the studio home (kind "tmp", `HOME_STAGING`): the added-models list (basemodels/added.py), a
  dataset claim's holder record (jobs/dataset_claims.py), a caption job's record
  (jobs/caption_records.py), the run timings (timings.py), the text signatures
  (training/inputs/text_signature.py), the decoded records (data/decoded.py), the thumbnails
  (data/thumbnails.py), the attention probe's results (training/speed/probe_cache.py). A server start
  removes them (`home_staging`, from jobs/leftovers.py); a CLI run beside the server (an import
  takes a claim, writes decoded records) names its own pid, so its files are kept while it runs.
  The encode cache's shards (data/disk_cache.py, possibly outside the home and shared) stage as
  `.<key>.safetensors.<pid>.tmp` and follow the same rule (`staged_writer`).
- In a dataset folder (kind "tmp", always with its id): an upload's copy of a file into a dataset
  on another file system (data/cross_device.py: `.a.png.<pid>-<hex>.tmp` beside its target, in
  the dataset's top level or a control folder). A server start removes those of killed writers
  (`cross_device.killed_copies`, from jobs/leftovers.py), and so does a CLI command that removes
  a killed upload's staging (data/staging_owner.remove_stale_staging): those two levels only, by
  name, never a read of the dataset's images.
- The saved Dynamo graphs (training/speed/precompile.py, kind "tmp": `<Inductor's cache>/lorastudio-
  dynamo/<key>/.<class>-<signature>.bin.<pid>-<hex>.tmp`, and its `.refused` notes): the next
  save into that key's folder removes what killed savers left there, and an older version's
  `tempfile.mkstemp` names a day old (RELIABILITY 1741).
- In a folder the user named (kind "staging" for `lora convert|merge|resize` and a run's LoRA
  files, lora/files.py; "partial" for `generate --out`, cli/generate_cmd.py): the next such write
  into that folder removes what killed writers of its kind left there (`remove_killed_staging`).
  Older staging names carry no pid (`.<name>.<hex>.staging`): their writer cannot be told, so
  one is taken only once a day old (`older_stale` says why that is safe); so are the home's
  (OLDER_HOME_STAGING: a decoded record's or thumbnail's `.<name>.<32 hex>.tmp`, a claim's
  `.<key>.<pid>-<hex>.holder.tmp`, the run timings' `.json.part`, the probe's `.probe-*.json`).

A writer on another host or in another pid namespace sharing the folder (a network file system,
containers) cannot be told by its pid: the home is one host's (jobs/homelock.py); a user's output
folder written from two such places at once is not covered (RELIABILITY Known problems).
"""

from __future__ import annotations

import logging
import os
import re
import time
import uuid
from pathlib import Path

from lorastudio.durable import fsync_path
from lorastudio.file_age import older_than
from lorastudio.processes import process_alive

log = logging.getLogger("lorastudio.jobs")

TMP = "tmp"  # the home's single-file writers
LORA_STAGING = "staging"  # a LoRA file a command or a run writes (lora/files.py)
IMAGE_PARTIAL = "partial"  # an image `generate --out` writes (cli/generate_cmd.py)
ID_HEX = 6  # `-<hex>` after the pid: 24 bytes of affixes in all at most, user_paths.MAX_NAME_BYTES
NAME_MAX = 255  # bytes of one file name (ext4 / xfs / btrfs)

# The home's folders where the single-file writers above stage ("" is the home itself; a `*`
# part is every sub-folder of that name's folder, as the thumbnails' <xx>/ prefixes).
HOME_STAGING = (
    "",  # added_models.json (basemodels/added.py)
    "claims",  # <key>.<pid>-<hex>.holder (jobs/dataset_claims.py)
    "caption-jobs",  # <id>.json (jobs/caption_records.py)
    "generation-jobs",  # <request_id>.json (jobs/generation_records.py)
    "gallery/references",  # .uses.json (jobs/references.py: file_age.BootLedger)
    "run_timings",  # <n>_<stamp>-<name>.json (timings.py)
    "cache/text-signatures",  # training/inputs/text_signature.py
    "cache/decoded",  # data/decoded.py
    "cache/attention-probe",  # training/speed/probe_cache.py
    "cache/thumbs/*",  # data/thumbnails.py (cache/thumbs/<xx>/<key>.jpg)
)

# The names an older lorastudio staged under without its pid (before session 28's leftovers2):
# their writer cannot be told, so a file of one is taken once STALE_AFTER_S old (`older_stale`).
STALE_AFTER_S = 24 * 3600
_HEX32_TMP = re.compile(r"^\..+\.[0-9a-f]{32}\.tmp$")  # `.<name>.<uuid hex>.tmp`
OLDER_HOME_STAGING: dict[str, re.Pattern[str]] = {
    "claims": re.compile(r"^\..+\.holder\.tmp$"),  # `.<key>.<pid>-<hex>.holder.tmp` (the holder's pid)
    "run_timings": re.compile(r"^[^.].*\.json\.part$"),  # `<n>_<stamp>-<name>.json.part`
    "cache/decoded": _HEX32_TMP,
    "cache/thumbs/*": _HEX32_TMP,
    "cache/attention-probe": re.compile(r"^\.probe-[a-z0-9_]+\.json$"),  # tempfile.mkstemp's
}
OLDER_USER_STAGING: dict[str, re.Pattern[str]] = {  # `.<name>.<8 hex>.<kind>`
    LORA_STAGING: re.compile(r"^\..+\.[0-9a-f]{8}\.staging$"),
    IMAGE_PARTIAL: re.compile(r"^\..+\.[0-9a-f]{8}\.partial$"),
}

# `.<name>.<pid>-<hex>.<kind>`; the home's older `.<name>.<pid>.tmp` (and the encode cache's) too.
# An older user-folder name `.<name>.<8 hex>.staging` is no pid even where its hex is all digits:
# a pid without its `-<hex>` is taken for kind "tmp" only.
_STAGED = re.compile(
    rf"^\.(?:.+\.)?(?P<pid>[1-9][0-9]{{0,9}})(?P<id>-[0-9a-f]{{{ID_HEX}}})?\.(?P<kind>[a-z]+)$"
)


def staging_path(target: Path, kind: str = TMP) -> Path:
    """A fresh hidden staging name beside `target`: `.<name>.<pid>-<hex>.<kind>` (this process's
    pid; `.<pid>-<hex>.<kind>` where the target's name is too long to fit in it)."""
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:ID_HEX]}.{kind}"
    staged = target.with_name(f".{target.name}.{tag}")
    if len(os.fsencode(staged.name)) > NAME_MAX:
        staged = target.with_name(f".{tag}")
    return staged


def write_staged_text(target: Path, text: str) -> None:
    """Write `text` (UTF-8) to `target` whole or not at all: staged beside it (`staging_path`: a
    killed writer's is removed at a server start), fsynced, renamed into place, its folder fsynced.
    Raises OSError; the staging file never stays behind this process."""
    write_staged_bytes(target, text.encode("utf-8"))


def write_staged_bytes(target: Path, data: bytes) -> None:
    """`write_staged_text` of bytes: `target` holds `data` whole or is as it was. Raises OSError;
    the staging file never stays behind this process (a kill's: `killed_writers_staging`)."""
    tmp = staging_path(target)
    try:
        with open(tmp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_path(target.parent)


def staged_writer(name: str, kind: str = TMP, with_id: bool = False) -> int | None:
    """The pid of the writer whose staging name of `kind` `name` is (`staging_path`, or the
    encode cache's `.<key>.safetensors.<pid>.tmp`), else None. `with_id`: only `staging_path`'s
    own form (`.<name>.<pid>-<hex>.<kind>`), as in a user's folder, where a hidden
    `.notes.123.tmp` of the user's is no staging name."""
    found = _STAGED.match(name)
    if found is None or found.group("kind") != kind:
        return None
    if found.group("id") is None and (kind != TMP or with_id):
        return None
    return int(found.group("pid"))


def killed_writers_staging(folder: Path, kind: str = TMP, with_id: bool = False) -> list[Path]:
    """The regular files directly in `folder` (a link among them is never one) whose names are
    staging names of `kind` (`with_id`: staged_writer's) of a writer that runs no more: what the
    rule above takes. Names are read without a stat each (only a match is looked at). A missing
    or unreadable folder: none."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        return [folder / name for name in _killed(fd, kind, with_id)]
    finally:
        os.close(fd)


def _killed(fd: int, kind: str, with_id: bool = False, older: re.Pattern[str] | None = None) -> list[str]:
    """The names in the folder open as `fd` that `killed_writers_staging` takes, and (`older`:
    the folder's older staging names without a pid) those of `older_stale`."""
    found: list[str] = []
    try:
        entries = list(os.scandir(fd))
    except OSError:
        return []
    now = time.time()
    for entry in entries:
        if older is not None and older.match(entry.name):
            if older_stale(entry, now):
                found.append(entry.name)
            continue
        if not entry.name.startswith("."):  # the bulk of a large folder: no regex, no stat
            continue
        pid = staged_writer(entry.name, kind, with_id)
        if pid is None:
            continue
        try:
            regular = entry.is_file(follow_symlinks=False)
        except OSError:
            continue
        if regular and not process_alive(pid):
            found.append(entry.name)
    return found


def older_stale(entry: os.DirEntry[str], now: float) -> bool:
    """Whether `entry`, a file under an older staging name (no pid: its writer cannot be told),
    is a killed writer's for certain: a regular file (never a link) last written more than
    STALE_AFTER_S before `now`. Safe because every writer of these names writes its staging
    file start to finish in one go and renames it at once (a record or a thumbnail in
    milliseconds, a LoRA file in minutes at most), each write moving the mtime, and only an older
    lorastudio writes these names: a day without a write is a writer that is gone. Were it only
    stopped (SIGSTOP) for a day, its rename then fails and nothing half-written is published."""
    try:
        if not entry.is_file(follow_symlinks=False):
            return False
        return older_than(entry.stat(follow_symlinks=False).st_mtime, STALE_AFTER_S, now)  # future: kept
    except OSError:
        return False


def home_staging(home: Path) -> list[Path]:
    """What killed single-file writers left in the studio home's HOME_STAGING folders: the
    staging files of writers gone (the pid rule), and those of an older lorastudio's names
    (OLDER_HOME_STAGING) a day old (`older_stale`)."""
    found: list[Path] = []
    for spec in HOME_STAGING:
        for folder in _folders(home, spec):
            try:
                fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                found += [folder / n for n in _killed(fd, TMP, older=OLDER_HOME_STAGING.get(spec))]
            finally:
                os.close(fd)
    return found


def remove_killed_staging(folder: Path, kind: str, older: re.Pattern[str] | None = None) -> list[Path]:
    """Remove what killed writers of `kind` left in `folder` (`killed_writers_staging`, and the
    older names of `kind` without a pid a day old: `older`, by default OLDER_USER_STAGING's,
    `older_stale`), each logged, through the folder's descriptor (a folder swapped for a link
    meanwhile is not followed); one that cannot be removed is skipped. Returns the removed paths."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return []
    removed: list[Path] = []
    try:
        for name in _killed(fd, kind, older=older or OLDER_USER_STAGING.get(kind)):
            try:
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:  # another command removed it meanwhile
                continue
            except OSError as err:
                log.warning("could not remove the staging file %s of a killed write: %s", folder / name, err)
                continue
            log.warning("removed the staging file %s of a killed write", folder / name)
            removed.append(folder / name)
    finally:
        os.close(fd)
    return removed


def _folders(home: Path, spec: str) -> list[Path]:
    """The folders of HOME_STAGING entry `spec` under `home` (links not followed)."""
    if not spec.endswith("/*"):
        return [home / spec] if spec else [home]
    parent = home / spec[:-2]
    try:
        return [Path(e.path) for e in os.scandir(parent) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
