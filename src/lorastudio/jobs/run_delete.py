"""Deleting a run: its record, its log and (unless kept or shared) its output folder, decided and
taken aside in one step under the job service's lock (JobService.delete_run), so a delete and a
resume or extension of the same run never both go ahead: the delete's rename lands either
before the resume is queued (the resume finds its checkpoint gone: 404) or after (the queued
resume's record shares the folder, which is then kept). The folder goes aside before the record
is deleted: a rename that fails (a read-only outputs root) keeps both and fails the delete, a
record that cannot be deleted puts the folder back (`put_back`), and a kill between the two
leaves the record, whose delete can be sent again (the trash goes at the next server start),
never an output folder no record can delete. No torch, no HTTP.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from lorastudio.errors import writing

RUN_DELETE_PREFIX = ".deleting-"  # a removal's hidden trash folder in outputs/ (jobs/leftovers.py)


def take_output_dir_aside(outputs_dir: Path, name: str) -> Path | bool:
    """Take outputs/<name> out of sight in one rename. Returns the trash folder to remove
    (`remove_trash`), True when the folder was a symbolic link (only the link is unlinked, never
    its target), False when there is nothing to remove (missing, or `name` not directly inside
    the outputs root)."""
    folder = outputs_dir / name
    if folder.parent != outputs_dir or not os.path.lexists(folder):
        return False
    if folder.is_symlink():
        folder.unlink()
        return True
    trash = outputs_dir / f"{RUN_DELETE_PREFIX}{uuid.uuid4().hex}"
    with writing(f"the output folder {name} could not be removed", folder):  # a read-only outputs root
        os.rename(folder, trash)
    return trash


def put_back(taken: Path | bool, folder: Path) -> None:
    """Undo `take_output_dir_aside`: the trash folder renamed back to `folder` (a run delete whose
    record could not be deleted keeps its files). A link that was unlinked stays gone."""
    if isinstance(taken, Path):
        os.rename(taken, folder)


def remove_trash(taken: Path | bool) -> bool:
    """Remove what `take_output_dir_aside` took aside (a kill meanwhile leaves the hidden trash
    folder to the next server start: jobs/leftovers.py). Returns whether anything was removed."""
    if isinstance(taken, Path):
        shutil.rmtree(taken)
        return True
    return taken
