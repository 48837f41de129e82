"""The run record's note on what a killed fresh run left and a later process removed.

Whichever process removes the files of a fresh run killed before its first checkpoint or LoRA
(jobs/leftovers.py: the job service after its worker died, a server start after the server died
with its worker, the next `lorastudio train` after a CLI run was killed) adds the sentence
`leftovers.removal_note` words to that run's record, as a warning: `lorastudio runs show`, GET
/api/runs/ID and the web run page show it with the run's other warnings. The run is the one the
folder's mark names (training/resume/fresh_mark.py), and only when its record has the folder's name as
its output name (a mark never puts a note on another run's record). One appending statement
under the store's own transaction (RunStore.add_warning), so a server's job service writing the
same store meanwhile loses nothing. A record that is gone (the run deleted), a store that cannot
be opened or written, a warnings list that is not JSON: logged, never fatal (the removal stands).
No torch, no HTTP.
"""

from __future__ import annotations

import logging
from pathlib import Path

from lorastudio.jobs.persist import STORE_ERRORS
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings

log = logging.getLogger("lorastudio.jobs")


def record_note(
    settings: Settings, run: Path, run_id: str | None, note: str, store: RunStore | None = None
) -> bool:
    """Add `note` (what was removed from output folder `run`) to the record of run `run_id`
    (from the folder's mark) in `store` (None: the home's store, opened and closed here).
    Returns whether a record took it; every other outcome is logged."""
    if run_id is None:
        log.warning("%s: its mark names no run record (a run started before marks named theirs)", run)
        return False
    own = store is None
    if store is None:
        if not settings.db_path.is_file():
            log.warning(
                "run %s: no run store at %s to note what was removed from %s", run_id, settings.db_path, run
            )
            return False
        try:
            store = RunStore.open(settings.db_path, recover=False)
        except STORE_ERRORS as err:
            log.error("run %s: the run store could not be opened to note what was removed: %s", run_id, err)
            return False
    try:
        if store.add_warning(run_id, note, output_name=run.name):
            return True
        log.warning(
            "run %s: no record of a run with output %r (deleted?) to note: %s", run_id, run.name, note
        )
    except STORE_ERRORS as err:
        log.error("run %s: noting what was removed from %s in its record failed: %s", run_id, run, err)
    finally:
        if own:
            store.close()
    return False
