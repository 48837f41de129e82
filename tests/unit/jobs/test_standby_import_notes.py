"""A standby worker's imports warn through transformers' and diffusers' own stderr handlers on a
host without torchvision or torchao: three unstamped console lines at every spawn (the server's
start and after each job). Now the child holds them (jobs/import_notes.py) and sends them with
its "ready" note, and the server logs each once per server life, stamped, as a lorastudio.jobs
warning (RELIABILITY 2032)."""

from __future__ import annotations

import logging
import multiprocessing

import pytest

from lorastudio.jobs import import_notes
from lorastudio.jobs.import_notes import held_library_warnings
from lorastudio.jobs.standby import StandbyProcess

NOTE = "transformers.utils.import_utils: `CLIPImageProcessor` requires torchvision (not installed)"


def test_a_library_warning_of_the_imports_is_held_not_printed_bare() -> None:
    from transformers.utils import logging as hf_logging

    library = hf_logging.get_logger("transformers.utils.import_utils")
    verbosity = hf_logging.get_verbosity()  # a CLI test before may have set it to errors only
    hf_logging.set_verbosity_warning()  # a standby's fresh process: the libraries' default
    printed: list[str] = []  # what the library's handlers emit (its stderr handler among them)
    recorder = logging.Handler()
    recorder.emit = lambda record: printed.append(record.getMessage())  # type: ignore[method-assign]
    root = logging.getLogger("transformers")
    root.addHandler(recorder)
    try:
        with held_library_warnings() as notes:
            library.warning("`CLIPImageProcessor` requires torchvision (not installed)")
            library.warning("`CLIPImageProcessor` requires torchvision (not installed)")
        assert notes == [NOTE]
        assert printed == []  # held from every handler of the library, not printed bare
        library.warning("after the imports: as before")  # the job's own warnings reach them
        assert printed == ["after the imports: as before"]
    finally:
        root.removeHandler(recorder)
        hf_logging.set_verbosity(verbosity)


def test_each_standbys_import_warnings_are_logged_once_per_server(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(import_notes, "_said", set())
    caplog.set_level(logging.WARNING, logger="lorastudio.jobs")
    for _ in range(2):  # two spawns, the same imports
        standby = StandbyProcess(parent_pid=1)
        ours, theirs = multiprocessing.Pipe(duplex=True)
        standby._conn = ours
        theirs.send({"ready": 1.0, "skipped": [], "cuda_runtime": None, "library_notes": [NOTE]})
        try:
            standby._read_note()
        finally:
            theirs.close()
            standby.end()
    said = [r for r in caplog.records if "requires torchvision" in r.getMessage()]
    assert len(said) == 1 and said[0].name == "lorastudio.jobs" and said[0].levelno == logging.WARNING
