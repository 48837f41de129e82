"""A standby worker whose imports initialise CUDA (seen on an H100 host, RESULTS note 33: the
three standbys in a row died with code 4 and the server said only "died while waiting"): it
says which PRELOAD import did it before it exits, and the keeper logs that once and spawns no
more (the same imports would do it again), instead of three tries (RELIABILITY 301). Since
RELIABILITY 302 it exits only when a CUDA context exists (or torch cannot tell): CUDA's runtime
initialised by an import without a context (torchao's module-level capability queries) is the
state a fresh worker's imports reach, and that standby is used."""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

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


# torch's answer to "does device i have a primary context?" on a CUDA build (absent on CPU ones)
CONTEXT = """
torch._C._cuda_hasPrimaryContext = lambda index: {held}
torch.cuda.device_count = lambda: 2
"""


def _run_standby(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, toucher: str
) -> tuple[mp.Process, dict, Any]:
    """A standby (forked: the patched PRELOAD and sys.path carry into it) whose second import is
    `toucher`; returns the process, its first message and the parent's end of its pipe."""
    (tmp_path / "cuda_toucher.py").write_text(toucher)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(standby, "PRELOAD", ("json", "cuda_toucher"))
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=standby.standby_main, args=(child, None, None, None, os.getpid()))
    process.start()
    child.close()
    assert parent.poll(60)
    return process, parent.recv(), parent


def test_the_standby_names_the_import_that_initialised_cuda(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    process, note, parent = _run_standby(tmp_path, monkeypatch, TOUCHER)  # torch cannot tell: barred
    process.join(30)
    parent.close()
    assert process.exitcode == CUDA_BY_IMPORT_EXIT
    assert note["cuda"] == "cuda_toucher"
    assert any("cuda_toucher.py" in frame for frame in note["where"]), note["where"]


def test_a_standby_holding_a_cuda_context_exits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    process, note, parent = _run_standby(tmp_path, monkeypatch, TOUCHER + CONTEXT.format(held="index == 1"))
    process.join(30)
    parent.close()
    assert process.exitcode == CUDA_BY_IMPORT_EXIT
    assert note["cuda"] == "cuda_toucher"


def test_cuda_initialised_without_a_context_leaves_the_standby_usable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    process, note, parent = _run_standby(tmp_path, monkeypatch, TOUCHER + CONTEXT.format(held="False"))
    try:
        assert "ready" in note and note["cuda_runtime"] == "cuda_toucher", note
        assert process.is_alive()  # waiting for its job
        parent.send(None)  # no job: it ends with 0
        process.join(30)
        assert process.exitcode == 0
    finally:
        parent.close()
        if process.is_alive():
            process.kill()


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
    assert (
        len(told) == 1 and "found a CUDA context created by its imports (while importing torchao" in told[0]
    )

    other = StandbyKeeper(lambda: False)  # any other death is retried, as before
    other._replace_dead(
        SimpleNamespace(process=SimpleNamespace(exitcode=1), pid=124, cuda_note=None, end=lambda: None)
    )
    assert other._deaths == 1
    ours.close()
    theirs.close()
