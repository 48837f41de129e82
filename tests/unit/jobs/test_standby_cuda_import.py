"""A standby worker whose imports initialise CUDA (seen on an H100 host, RESULTS note 33: the
three standbys in a row died with code 4 and the server said only "died while waiting"): it
says which PRELOAD import did it before it exits, and the keeper logs that once and spawns no
more (the same imports would do it again), instead of three tries (RELIABILITY 301)."""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from lorastudio.jobs import standby
from lorastudio.jobs.standby import CUDA_BY_IMPORT_EXIT, MAX_DEATHS, StandbyKeeper, StandbyProcess

TOUCHER = """
import torch
try:
    torch.cuda._lazy_init()  # what a library's torch.cuda.get_device_capability() at import does
except Exception:  # no CUDA on this host: only the call is what counts here
    pass
torch.cuda._initialized = True
"""


def test_the_standby_names_the_import_that_initialised_cuda(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cuda_toucher.py").write_text(TOUCHER)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(standby, "PRELOAD", ("json", "cuda_toucher"))
    ctx = mp.get_context("fork")  # the patched PRELOAD and sys.path carry into the child
    parent, child = ctx.Pipe()
    process = ctx.Process(target=standby.standby_main, args=(child, None, None, None, os.getpid()))
    process.start()
    child.close()
    assert parent.poll(60)
    note = parent.recv()
    process.join(30)
    assert process.exitcode == CUDA_BY_IMPORT_EXIT
    assert note["cuda"] == "cuda_toucher"
    assert any("cuda_toucher.py" in frame for frame in note["where"]), note["where"]


def test_the_parent_reads_the_note_and_the_keeper_spawns_no_more(caplog: pytest.LogCaptureFixture) -> None:
    handle = StandbyProcess(os.getpid())  # never started: its pipe is replaced by the test's
    ours, theirs = mp.get_context("spawn").Pipe()
    handle._conn = ours
    theirs.send({"cuda": "torchao", "where": ["library.py:1 in <module>", "torchao/x.py:9 in check"]})
    handle._read_note()
    assert handle.cuda_note == "while importing torchao (torchao/x.py:9 in check <- library.py:1 in <module>)"
    assert handle.ready_s is None

    keeper = StandbyKeeper(lambda: False)
    dead = SimpleNamespace(
        process=SimpleNamespace(exitcode=CUDA_BY_IMPORT_EXIT), pid=123, cuda_note=handle.cuda_note
    )
    dead.end = lambda: None
    with caplog.at_level(logging.WARNING, logger="lorastudio.jobs"):
        keeper._replace_dead(dead)
    assert keeper._deaths == MAX_DEATHS  # no respawn: `_due` is False from now on
    assert not keeper._due(None)
    told = [r.getMessage() for r in caplog.records]
    assert len(told) == 1 and "found CUDA initialised by its imports (while importing torchao" in told[0]

    other = StandbyKeeper(lambda: False)  # any other death is retried, as before
    other._replace_dead(
        SimpleNamespace(process=SimpleNamespace(exitcode=1), pid=124, cuda_note=None, end=lambda: None)
    )
    assert other._deaths == 1
    ours.close()
    theirs.close()
