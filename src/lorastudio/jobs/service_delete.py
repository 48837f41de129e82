"""The job service's delete of a finished run: its record, its log and its output folder. A mixin
of JobService (jobs/service.py), split out to keep each file short: the decision and the folder's
move aside are made under the service's lock, the one a resume is queued under, with the helpers
of jobs/run_delete.py (what a failure part way leaves). No torch, no HTTP.
"""

from __future__ import annotations

import abc
import threading
from pathlib import Path
from typing import Any

from lorastudio.errors import JobActive
from lorastudio.jobs.records import LIVE_STATUSES, Job
from lorastudio.jobs.run_delete import put_back, refuse_if_started_from, remove_trash, take_output_dir_aside
from lorastudio.jobs.store import RunStore
from lorastudio.jobs.worker_log import remove_log
from lorastudio.settings import Settings


class RunDeletes:
    """The run delete of JobService (see there for the attributes it shares)."""

    settings: Settings
    store: RunStore
    _cond: threading.Condition
    _resume_from: dict[str, Path]

    @abc.abstractmethod
    def _live_jobs(self) -> list[Job]:
        """Implemented by JobQueries (jobs/service_queries.py)."""

    def delete_run(self, run_id: str, keep_files: bool = False) -> dict[str, Any]:
        """Delete a final run's record, its log and (unless `keep_files`, or another run's
        record shares it, a queued resume's included) its output folder, decided and the folder
        taken aside under the lock a resume is queued under (jobs/run_delete.py). Returns
        {"deleted": run_id, "files_removed"}. Raises NotFound (no such run), JobActive (live)."""
        with self._cond:
            run = self.store.get_run(run_id, max_points=0)
            live = {s.value for s in LIVE_STATUSES}
            if run["status"] in live or run_id in {j.id for j in self._live_jobs()}:
                raise JobActive(f"run {run_id} is {run['status']}; stop it first")
            name = run["output_name"]
            shared = [r for r in self.store.runs_with_output_name(name) if r != run_id]
            keep = keep_files or bool(shared) or not name
            if not keep:  # a live fresh run's init_lora file in it: JobActive
                refuse_if_started_from(self._live_jobs(), self._resume_from, self.settings, name)
            # the folder aside first, then the record (jobs/run_delete.py: what a failure leaves)
            taken = not keep and take_output_dir_aside(self.settings.outputs_dir, name, run_id)  # journaled
            try:
                self.store.delete_run(run_id)
            except BaseException:
                put_back(taken, self.settings.outputs_dir / name)
                raise
        remove_log(self.settings, run_id)
        return {"deleted": run_id, "files_removed": remove_trash(taken)}
