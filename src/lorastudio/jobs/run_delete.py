"""Deleting a run: its record, its log and (unless kept or shared) its output folder, decided and
taken aside in one step under the job service's lock (JobService.delete_run), so a delete and a
resume or extension of the same run never both go ahead: the delete's rename lands either
before the resume is queued (the resume finds its checkpoint gone: 404) or after (the queued
resume's record shares the folder, which is then kept). The folder goes aside before the record
is deleted: a rename that fails (a read-only outputs root) keeps both and fails the delete, a
record that cannot be deleted puts the folder back (`put_back`).

The rename aside is the delete's journal: the trash folder's name carries the run's id
(`outputs/.deleting-<hex>.run-<id>`), so a kill between it and the record's delete leaves a
trash folder that says whose delete it was, and the next server start finishes that delete (the
record, then the log: `finish_killed_deletes`) before the trash goes (jobs/leftovers.py). A kill
before the rename changed nothing; after the record's delete, only files are left, which the
start removes. No torch, no HTTP.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import sqlite3
import uuid
from collections.abc import Container, Iterable
from pathlib import Path

from lorastudio.errors import JobActive, LorastudioError, NoSpaceLeft, NotFound, writing
from lorastudio.jobs.records import Job
from lorastudio.settings import Settings
from lorastudio.training.adapters.init_lora_rules import init_lora_path

log = logging.getLogger("lorastudio.jobs")

RUN_DELETE_PREFIX = ".deleting-"  # a removal's hidden trash folder in outputs/ (jobs/leftovers.py)
_SAFE_ID = re.compile(r"^[0-9A-Za-z_-]{1,64}$")  # a run id a trash name can carry (ids are 12 hex)
JOURNALED_TRASH = re.compile(
    rf"^{re.escape(RUN_DELETE_PREFIX)}[0-9a-f]{{32}}\.run-(?P<id>[0-9A-Za-z_-]{{1,64}})$"
)


def refuse_if_started_from(
    live: Iterable[Job], resumed: Container[str], settings: Settings, name: str
) -> None:
    """Raise JobActive when a live job of `live` reads a LoRA file inside run folder
    outputs/<name>: its init_lora (a job that is not a resume, its id not in `resumed`: a resume
    takes its weights from its checkpoint), read at its worker's start and again when it loads the
    denoiser (training/adapters/init_lora.py), or its assistant_lora (an absolute path; merged into the
    base at every session's start, a resume's too: training/adapters/assistant.py). A delete of the folder
    meanwhile failed the job, after its first phases (RELIABILITY 1921). A value that names no
    file any more is not this folder's. Called under the job service's lock, where a job is
    queued (`_enqueue` refuses a start whose file is gone: gone_check.refuse_if_gone)."""
    inside = os.path.realpath(settings.outputs_dir / name)
    for job in live:
        for field, path in _lora_files_read(job, job.id in resumed, settings):
            if os.path.commonpath([path, inside]) == inside:
                raise JobActive(
                    f"{path} is the {field} of live training job {job.id} ({job.config.output_name!r}): "
                    "delete this run when that job ends, or delete its record only (keep_files)"
                )


def _lora_files_read(job: Job, resumed: bool, settings: Settings) -> list[tuple[str, str]]:
    """(setting, real path) of the LoRA files `job` reads that exist: its init_lora unless
    `resumed`, its assistant_lora where it is a local path."""
    found = []
    if job.config.init_lora is not None and not resumed:
        with contextlib.suppress(LorastudioError):  # a file gone or not named: no file of any folder
            found.append(("init_lora", os.path.realpath(init_lora_path(job.config.init_lora, settings))))
    helper = job.config.assistant_lora
    if helper is not None and os.path.isabs(helper) and os.path.isfile(helper):
        found.append(("assistant_lora", os.path.realpath(helper)))
    return found


def take_output_dir_aside(outputs_dir: Path, name: str, run_id: str | None = None) -> Path | bool:
    """Take outputs/<name> out of sight in one rename, to a trash name carrying `run_id` (the
    delete's journal: `finish_killed_deletes`). Returns the trash to remove (`remove_trash`: a
    folder, or a symbolic link that stood for the folder, whose target is never touched), False
    when there is nothing to remove (missing, or `name` not directly inside the outputs root)."""
    folder = outputs_dir / name
    if folder.parent != outputs_dir or not os.path.lexists(folder):
        return False
    tag = f".run-{run_id}" if run_id is not None and _SAFE_ID.match(run_id) else ""
    trash = outputs_dir / f"{RUN_DELETE_PREFIX}{uuid.uuid4().hex}{tag}"
    with writing(f"the output folder {name} could not be removed", folder):  # a read-only outputs root
        os.rename(folder, trash)
    return trash


def put_back(taken: Path | bool, folder: Path) -> None:
    """Undo `take_output_dir_aside`: the trash renamed back to `folder` (a run delete whose
    record could not be deleted keeps its files, or its link)."""
    if isinstance(taken, Path):
        os.rename(taken, folder)


def remove_trash(taken: Path | bool) -> bool:
    """Remove what `take_output_dir_aside` took aside (a link: only the link). A kill meanwhile
    leaves the trash to the next server start (jobs/leftovers.py). Returns whether anything was
    removed."""
    if not isinstance(taken, Path):
        return taken
    if taken.is_symlink():
        taken.unlink()
    else:
        shutil.rmtree(taken)
    return True


def killed_deletes(outputs_dir: Path) -> dict[Path, str]:
    """{trash: the run id it names} of the run deletes whose trash is still in `outputs_dir`:
    in a server start, deletes killed after their rename aside."""
    try:
        names = os.listdir(outputs_dir)
    except OSError:
        return {}
    return {outputs_dir / n: m.group("id") for n in sorted(names) if (m := JOURNALED_TRASH.match(n))}


def finish_killed_deletes(settings: Settings) -> list[Path]:
    """Finish each run delete a kill cut after its rename aside (`killed_deletes`): the run's
    record (gone already: nothing to do) and its log are deleted, each logged; the trash is left
    to the start's leftover removal. Call only while holding the home lock (no delete in
    flight). Returns the trash of the deletes that could not be finished (the run store
    refused: a full disk, a locked or damaged store), which must be kept for the next start."""
    found = killed_deletes(settings.outputs_dir)
    if not found:
        return []
    from lorastudio.jobs.store import RunStore  # only when a delete was killed
    from lorastudio.jobs.worker_log import log_path

    try:
        store = RunStore.open(settings.db_path, recover=False)
    except (sqlite3.Error, OSError) as err:
        log.warning("the killed run deletes %s could not be finished (the run store: %s)", sorted(found), err)
        return list(found)
    kept: list[Path] = []
    try:
        for trash, run_id in found.items():
            try:
                store.delete_run(run_id)
                log.warning(
                    "run %s: finished its delete, killed after its folder went aside (%s)", run_id, trash
                )
            except NotFound:
                pass  # killed after the record's delete: only its files were left
            except (NoSpaceLeft, sqlite3.Error, OSError) as err:  # kept for the next start
                log.warning(
                    "run %s: its killed delete could not be finished (%s); kept %s", run_id, err, trash
                )
                kept.append(trash)
                continue
            log_path(settings, run_id).unlink(missing_ok=True)
    finally:
        store.close()
    return kept
