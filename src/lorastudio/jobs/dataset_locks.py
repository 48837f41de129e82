"""Training and caption jobs never share a dataset folder (RELIABILITY.md): a caption job writes
captions that a run reads while it encodes them, so one waits for the other.

The two services publish what they hold and check the other's under one lock order, so a start
on each side at the same moment cannot both pass:
- a training start (`JobService._enqueue`) checks the folders being captioned and queues the job
  in one hold of the service's lock (the check takes the caption service's lock inside it);
- a caption start registers its job first (under the caption service's lock only), then checks
  the training jobs' folders (the service's lock), and withdraws the job when one overlaps.
Either the run sees the caption job, or the caption job sees the run (both may refuse at once;
never both pass). Folders overlap when one is the other or lies inside it (a kohya sub-folder).
No torch, no HTTP.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from lorastudio.errors import JobActive
from lorastudio.jobs.dataset_claims import READ, DatasetClaim


def overlaps(a: Path, b: Path) -> bool:
    """Whether folder `a` is `b`, or either lies inside the other (paths as given, resolved)."""
    return a == b or a in b.parents or b in a.parents


def captioned_conflict(run_folders: Iterable[str | Path], captioning: Mapping[Path, str]) -> str | None:
    """Why a run reading `run_folders` cannot start while `captioning` (dataset folder -> caption
    job id) runs; None when no folder overlaps."""
    for raw in run_folders:
        folder = Path(raw)
        for busy, job_id in captioning.items():
            if overlaps(folder, busy):
                return (
                    f"dataset {busy.name!r} ({busy}) is being captioned by caption job {job_id}; "
                    "start the run when it ends, or cancel it"
                )
    return None


def claim_for_run(
    home: Path, datasets_dir: Path, folders: list[Path], captioning: Mapping[Path, str], holder: str
) -> DatasetClaim:
    """The read claim of a server run on its dataset `folders`, taken under the job service's
    lock: raises JobActive when a caption job of this server writes one of them (the lock order
    above), DatasetBusy when another process does (jobs/dataset_claims.py; waits at most 1 s, as
    the service's lock is held)."""
    conflict = captioned_conflict(folders, captioning)
    if conflict is not None:
        raise JobActive(conflict)
    return DatasetClaim.take(home, datasets_dir, folders, READ, holder, wait_s=1.0)
