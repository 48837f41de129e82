"""Crash leftovers in the studio home, removed when a server starts.

Every multi-file write of lorastudio stages into a hidden folder and renames it into place, and
every delete renames first and then removes. A kill -9 (or a power cut) in between leaves the
hidden folder behind, for ever: an upload's or import's `datasets/.uploads/<id>/` (hundreds of
MB; one a live CLI import or upload owns is kept, data/staging_owner.py, and the next `datasets`
command or `train` removes a killed one's beside a server too), a run delete's
`outputs/.deleting-<id>.run-<run id>/` (tens of thousands of files; its run's record and log are
deleted first, `start_leftover_cleanup`), a model delete's
`models/.<name>.deleting-<id>/`, a tiny model's `models/.<name>.staging-<pid>-<id>/`, a LoRA
export's `outputs/<run>/.staging-<id>/` (a snapshot's `outputs/<run>/loras/.staging-<id>/`), a
checkpoint's `outputs/<run>/checkpoints/.staging-*` or `.removing-*`, a sample's
`outputs/<run>/samples/.staging-<id>.png`, a validation record's `outputs/<run>/.staging-<id>.json`
(training/resume/run_files.py: the run's staging names), a caption edit's
`datasets/<name>/.<file>.<id>.tmp`, an upload's copy into a dataset on another file system
`datasets/<name>/[control/].<file>.<pid>-<hex>.tmp` (once its writer is gone:
data/cross_device.killed_copies; a dataset's top level and control folders only),
a generated image's or an uploaded reference's `gallery/.<file>.partial` /
`gallery/references/.<id>.partial`, a gallery sidecar's `gallery/.<stem>.json.<id>.tmp` and the
sidecar `gallery/<stem>.json` of an image killed between its two renames (its `.partial` beside it,
no PNG), a latent or caption shard's `cache/encoded/<kind>/<model>/<xx>/.<key>.safetensors.<pid>.tmp`
(kept while its writer lives: the cache may be outside the home and shared), and the staging files
`.<name>.<pid>-<hex>.tmp` of the home's single-file writers (added models, claim holders, caption
job records, run timings, text signatures, decoded records, thumbnails, probe results) whose writer
is gone (lorastudio/staged_files.py: the names and the one rule, the pid in the name runs no
process). A server start also prunes the encode cache to its cap (`start_cache_prune`,
data/cache_prune.py), in its own thread.

`start_leftover_cleanup` runs right after the server took the home lock (jobs/homelock.py): no
other server and no CLI run writes to the home then (a tiny model's staging, `lorastudio tiny`
takes no lock, is kept while its pid lives). Listed at once, removed in a background thread, each
logged with its size. A fetch's `models/.<name>.fetching/` is kept (a later fetch resumes it). A
run folder `outputs/<run>/` holding only folders (its staging gone) is one too: a run killed before
its first file, whose empty folder refused its name to every new run; a file or folder no run
writes (training/resume/run_files.py: the one list) keeps it, logged. So is everything a run writes in the
folder of a fresh run killed before its first checkpoint or LoRA (run_files.killed_fresh: its
marked folder's listed entries are that session's): samples, LoRA snapshots, the validation record,
tracker logs, then the folders by rmdir only; that run's record gets the note of what went
(`note_killed_runs`, jobs/killed_notes.py). Nothing in an output folder is removed through a link
(run_files.remove_entry). `lorastudio train` (no exclusive lock: other CLI runs share the home)
removes the output folders' part of these at its start, for the folders no live run holds
(`remove_abandoned_runs`). Both also remove the name reservations `outputs/.<name>.reserved` of
killed namers, never one a live holder locks (name_reserve.sweep_stale_reservations, RELIABILITY
1127).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from lorastudio.data.cross_device import killed_copies
from lorastudio.data.decoded_sweep import orphan_records, remove_orphan_records
from lorastudio.data.disk_cache import cache_leftovers, cache_root
from lorastudio.data.staging_owner import stale_entries
from lorastudio.data.writes import finish_journaled_renames
from lorastudio.jobs.killed_notes import record_note
from lorastudio.jobs.leftover_removal import remove_leftovers  # the removal of what is listed here
from lorastudio.jobs.run_delete import JOURNALED_TRASH, finish_killed_deletes
from lorastudio.name_reserve import sweep_stale_reservations
from lorastudio.processes import process_alive
from lorastudio.settings import Settings
from lorastudio.staged_files import home_staging
from lorastudio.training.resume.fresh_mark import read_mark
from lorastudio.training.resume.run_files import (
    FRESH_MARK,
    WRITER_FOLDERS,
    entry_names,
    is_leftover,
    kept_note,
    killed_fresh,
    leftovers,
    owned,
    survey,
)
from lorastudio.training.resume.run_lock import MOUNT_OWN_ENTRIES, unowned

log = logging.getLogger("lorastudio.jobs")

NOTE_NAMES = 10  # the entries `removal_note` names before "and N more"
_RUN_DELETE = re.compile(
    r"^\.deleting-[0-9a-f]+$"
)  # data/dataset_delete.py; a run delete of an older version
_MODEL_DELETE = re.compile(r"^\..+\.deleting-[0-9a-f]+$")  # basemodels/catalogue.py
_TINY_STAGING = re.compile(r"^\..+\.staging-(\d+)-[0-9a-f]+$")  # tiny/staging.py (with the writer's pid)
_CAPTION_TMP = re.compile(r"^\..+\.[0-9a-f]{32}\.tmp$")  # data/writes.py staged_write
_SIDECAR_TMP = re.compile(r"^\..+\.json\.[0-9a-f]{32}\.tmp$")  # a gallery sidecar's staged_write
_PARTIAL = re.compile(r"^\..+\.partial$")  # jobs/generation.py image, jobs/references.py upload


def find_leftovers(settings: Settings) -> list[Path]:
    """Every crash leftover in the home (see the module docstring), without touching them."""
    found: list[Path] = []
    found += stale_entries(settings.datasets_dir, unknown_too=True)  # a live CLI import's is held: kept
    for folder in (settings.outputs_dir, settings.datasets_dir):  # run deletes, dataset deletes
        found += [p for p in _children(folder) if _RUN_DELETE.match(p.name) or JOURNALED_TRASH.match(p.name)]
    for item in _children(settings.models_dir):
        tiny = _TINY_STAGING.match(item.name)
        if _MODEL_DELETE.match(item.name) or (tiny and not process_alive(int(tiny.group(1)))):
            found.append(item)
    for run in _run_folders(settings):
        found += _run_leftovers(run)
    for dataset in _children(settings.datasets_dir):
        if dataset.name.startswith(".") or not dataset.is_dir() or dataset.is_symlink():
            continue
        found += [p for p in _hidden_files(dataset) if _CAPTION_TMP.match(p.name)]
        found += killed_copies(dataset)  # data/cross_device.py: a killed upload's copy of a file
    found += cache_leftovers(cache_root(settings))  # data/disk_cache.py: staged shards of dead writers
    found += home_staging(settings.home)  # staged_files.py: the single-file writers' of dead writers
    gallery = settings.home / "gallery"  # jobs/gallery.py gallery_dir, jobs/references.py
    for folder in (gallery, gallery / "references"):
        found += [p for p in _children(folder, hidden=True) if _PARTIAL.match(p.name) and p.is_file()]
    return sorted(found + _gallery_sidecar_leftovers(gallery))


def _gallery_sidecar_leftovers(gallery: Path) -> list[Path]:
    """A sidecar's staging file (`.<stem>.json.<hex>.tmp`: killed while it was written) and the
    sidecar of an image that was never kept (`<stem>.json` beside its image's staging
    `.<stem>.png.partial` and no `<stem>.png`: killed between the two renames,
    jobs/generation.py writes the sidecar first). A sidecar whose image a user removed by hand
    is not one (no staging beside it): kept."""
    found: list[Path] = []
    for p in _children(gallery, hidden=True):  # both are hidden names: no Path or stat for an image
        if not p.is_file() or p.is_symlink():
            continue
        if _SIDECAR_TMP.match(p.name):
            found.append(p)
        elif _PARTIAL.match(p.name) and p.name.endswith(".png.partial"):
            stem = p.name[1 : -len(".png.partial")]
            sidecar = gallery / f"{stem}.json"
            if not (gallery / f"{stem}.png").exists() and sidecar.is_file() and not sidecar.is_symlink():
                found.append(sidecar)
    return found


@dataclass(frozen=True)
class Cleared:
    """What `clear_abandoned_run` removed from output folder `run`: `removed` (its paths), and
    `run_id`, the record named by the mark of a killed fresh run whose files went (None: no
    such run, or its mark names none)."""

    run: Path
    removed: list[Path] = field(default_factory=list)
    run_id: str | None = None


def remove_abandoned_runs(settings: Settings) -> list[Path]:
    """For `lorastudio train`, which shares the home with other CLI runs: the crash leftovers of
    the output folders that no live session holds (training/resume/run_lock.py: the kernel dropped a
    killed run's lock), each removed under that folder's lock, so no run starts writing it
    meanwhile. Returns what was removed: the staging of killed writes and the folders of runs
    killed before they wrote a file (which refused their name to every new run)."""
    return [path for cleared in clear_abandoned_runs(settings) for path in cleared.removed]


def clear_abandoned_runs(settings: Settings) -> list[Cleared]:
    """`remove_abandoned_runs`, one `Cleared` an output folder that lost something."""
    return [cleared for run in _run_folders(settings) if (cleared := clear_abandoned_run(run)).removed]


def clear_abandoned_run(run: Path) -> Cleared:
    """`remove_abandoned_runs` for one output folder `run` (`outputs/<name>`): what its sessions
    left, once none holds it, under its lock. A job (or a `--gpus N` launch) that ended without a
    LoRA or checkpoint, its processes gone (a rank that failed and the ranks torchrun stopped, a
    worker killed), leaves no empty folder: removed by rmdir only, so a file in it keeps it (one
    no run writes is logged: run_files.kept_note); a fresh one leaves none of what it wrote
    either (`_run_leftovers`; `removal_note` words it for the run record, whose id the folder's
    mark gave: `Cleared.run_id`). Nothing is removed while a live session holds it."""
    if run.name.startswith(".") or not run.is_dir() or run.is_symlink():
        return Cleared(run)
    with unowned(run) as free:
        if free and (found := _run_leftovers(run)):
            mark = read_mark(run) if killed_fresh(run) else None  # before its removal takes the mark
            remove_leftovers(found)
            return Cleared(run, found, mark.run_id if mark is not None else None)
    return Cleared(run)


def clear_own_run(run: Path) -> Cleared:
    """`clear_abandoned_run` for a session of this process that ends itself with its folder's
    lock held (a hung one-process `lorastudio train` the hang watch ends: cli/self_watch.py):
    nothing writes `run` any more, so it is cleared without taking the lock."""
    if run.name.startswith(".") or not run.is_dir() or run.is_symlink():
        return Cleared(run)
    mark = read_mark(run) if killed_fresh(run) else None
    found = _run_leftovers(run)
    remove_leftovers(found)
    return Cleared(run, found, mark.run_id if mark is not None else None)


def killed_fresh_runs(settings: Settings) -> dict[Path, str | None]:
    """{output folder: the run id its mark names} of every output folder that a fresh run killed
    before its first checkpoint or LoRA left (run_files.killed_fresh): for a server start, which
    lists them before its clean-up removes their marks. Call only while no session runs (the
    home lock held)."""
    found: dict[Path, str | None] = {}
    for run in _run_folders(settings):
        if killed_fresh(run) and (mark := read_mark(run)) is not None:
            found[run] = mark.run_id
    return found


def removal_note(run: Path, removed: list[Path]) -> str | None:
    """What the run record says when `clear_abandoned_run` removed what a killed fresh run
    wrote in `run` (not only staging or an empty folder): "removed 3 entries the killed fresh run
    wrote in outputs/x: loras/x-step-000002.json, ..." and what stayed (`kept_note`). None when
    `removed` holds none of them."""
    written = entry_names(run, [p for p in removed if _session_entry(run, p)])
    if not written:
        return None
    shown = ", ".join(written[:NOTE_NAMES]) + (
        f" and {len(written) - NOTE_NAMES} more" if len(written) > NOTE_NAMES else ""
    )
    note = f"removed {len(written)} entr{'y' if len(written) == 1 else 'ies'} the killed fresh run wrote in {run}: {shown}"
    if run.is_dir():
        _, other = survey(run)
        note += f"; {kept_note(run, entry_names(run, other))}" if other else f"; kept {run}"
    else:
        note += f"; its folder is gone, the name {run.name!r} free"
    return note


def _session_entry(run: Path, path: Path) -> bool:
    """Whether removed `path` is an entry the run wrote (not its folder, a writer folder, its
    mark or staging): what `removal_note` names."""
    if path == run or is_leftover(path.name) or path == run / FRESH_MARK:
        return False
    return not (path.parent == run and path.name in WRITER_FOLDERS)


def _is_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _run_folders(settings: Settings) -> list[Path]:
    return [
        run
        for run in _children(settings.outputs_dir)
        if not run.name.startswith(".") and run.is_dir() and not run.is_symlink()
    ]


def _run_leftovers(run: Path) -> list[Path]:
    """The crash leftovers of output folder `run`: the staging of its killed writes
    (run_files.leftovers); in the folder of a fresh run killed before its first checkpoint or
    LoRA (run_files.killed_fresh: only that session wrote there), every entry a run writes
    (run_files.survey) and the folder when nothing else is in it; else the folder itself when it holds nothing else but the empty
    folders a run makes (killed before it wrote a file: its name is free again;
    `remove_leftovers` removes it only while it is empty). Anything no run writes keeps it (a
    user's file or folder), logged when nothing else does. A folder that is a mount point (a
    disk mounted for a run, RELIABILITY 1187) is never listed itself, nor its lost+found."""
    found = leftovers(run)
    fresh = killed_fresh(run)
    if not fresh and _keeps_a_file(run, found):
        return found  # what `_holds_nothing` would say without walking it: a year of runs, 2.7 s a start
    mine, other = survey(run)
    mounted = os.path.ismount(run)
    itself = [] if mounted else [run]
    other = [p for p in other if not (mounted and p.parent == run and p.name in MOUNT_OWN_ENTRIES)]
    if fresh:  # its only session was killed before a checkpoint or LoRA: all of it
        found = sorted({*found, *mine})
        if not other:
            return [*found, *itself]
        log.warning("%s", kept_note(run, entry_names(run, other)))
        return [*found, *(run / f for f in WRITER_FOLDERS if _is_folder(run / f))]  # rmdir only
    if not _holds_nothing(run, {*found, *other}):
        return found  # what a run wrote: kept (which session wrote it died with the session)
    if not other:
        return [*found, *itself]
    log.warning("%s", kept_note(run, entry_names(run, other)))
    return found


def _keeps_a_file(run: Path, found: list[Path]) -> bool:
    """Whether output folder `run` holds, directly, a regular file a run writes (its LoRA, a
    sidecar, validation.json) other than `found`: then `_holds_nothing` is false and the folder
    is kept, so the rest of it (checkpoints, samples: thousands of entries in a long run's) need
    not be walked at a server's start (RELIABILITY 1223)."""
    aside = set(found)
    return any(owned(run, p) for p in _children(run) if p not in aside)  # owned: a regular file by its name


def _holds_nothing(folder: Path, aside: set[Path]) -> bool:
    """Whether `folder` holds no file, link or other entry but folders, leaving out `aside`
    (leftovers found in it, and what no run writes): the output folder of a run killed before it
    wrote anything, whose name every new run was refused ("already exists") while nothing could
    resume it."""
    for root, dirs, files in os.walk(folder):
        if any(Path(root, f) not in aside for f in files):
            return False
        if any(os.path.islink(os.path.join(root, d)) and Path(root, d) not in aside for d in dirs):
            return False
        dirs[:] = [d for d in dirs if Path(root, d) not in aside]
    return True


def start_leftover_cleanup(settings: Settings) -> threading.Thread | None:
    """List the home's crash leftovers now and remove them in a background thread (returned;
    None when there are none); what a killed fresh run wrote is then noted in its record
    (`note_killed_runs`). Call only while holding the home lock. First the renames a killed bulk
    caption edit journaled are finished (their staged files are not leftovers: the edit was
    written whole, data/writes.journaled_renames), and so are the run deletes killed after their
    folder went aside (jobs/run_delete.finish_killed_deletes: the record and log of the run its
    trash names; a trash whose record the store refused to delete is kept for the next start),
    and the name reservations of killed namers are removed (`sweep_stale_reservations`: a live
    holder's, the job service's of a job submitted meanwhile, is kept). The thread also removes
    the decoded-images records of dataset folders removed by hand (data/decoded_sweep.py: only
    where the folder's root is there and is its file system)."""
    for name, err in finish_journaled_renames(settings.datasets_dir):  # a killed caption edit's
        log.warning("dataset %s: the renames of a killed caption edit: %s", name, err or "finished")
    unfinished = set(finish_killed_deletes(settings))  # a killed run delete's record and log
    for path in sweep_stale_reservations(settings.outputs_dir):  # a few bytes each: at once
        log.warning("removed the name reservation a killed run left: %s", path)
    found = [p for p in find_leftovers(settings) if p not in unfinished]  # kept: the next start's
    orphans = orphan_records(settings.decoded_record_dir)  # of dataset folders removed by hand
    if not found and not orphans:
        return None
    fresh = killed_fresh_runs(settings)  # before the thread removes their marks
    thread = threading.Thread(
        target=_clean_up, args=(settings, found, fresh, orphans), name="lorastudio-cleanup", daemon=True
    )
    thread.start()
    return thread


def _clean_up(
    settings: Settings, found: list[Path], fresh: dict[Path, str | None], orphans: list[Path]
) -> None:
    remove_leftovers(found)
    note_killed_runs(settings, found, fresh)
    remove_orphan_records(orphans)


def note_killed_runs(settings: Settings, removed: list[Path], fresh: dict[Path, str | None]) -> None:
    """For each killed fresh run's folder in `fresh` ({folder: its mark's run id}), log what
    `removed` took from it (`removal_note`) and add that to the run's record
    (jobs/killed_notes.record_note: a record gone or unreadable is logged)."""
    for run, run_id in fresh.items():
        note = removal_note(run, [p for p in removed if p == run or run in p.parents])
        if note is not None:
            log.warning("run %s: %s", run_id or "(not recorded)", note)
            record_note(settings, run, run_id, note)


def start_cache_prune(settings: Settings) -> threading.Thread:
    """Prune the on-disk encode cache to its cap (data/cache_prune.py: least recently used
    entries no run holds) in a background thread (returned), so a server start never waits on
    a large removal. A prune that fails is logged."""
    from lorastudio.data.cache_prune import prune_after_run

    thread = threading.Thread(
        target=prune_after_run, args=(settings,), name="lorastudio-cache-prune", daemon=True
    )
    thread.start()
    return thread


def _hidden_files(folder: Path) -> list[Path]:
    """The hidden regular files directly in `folder` (links left out), its names read without a
    stat each but a hidden one's: a dataset of 100,000 images costs one directory read."""
    try:
        with os.scandir(folder) as entries:
            return [
                Path(e.path) for e in entries if e.name.startswith(".") and e.is_file(follow_symlinks=False)
            ]
    except OSError:  # missing or not a folder
        return []


def _children(folder: Path, hidden: bool = False) -> list[Path]:
    """The entries of `folder` (`hidden`: only those whose name starts with a dot)."""
    try:
        return [folder / n for n in os.listdir(folder) if not hidden or n.startswith(".")]
    except OSError:  # missing or not a folder
        return []
