"""jobs/launch_report.py: the cause of a failed `train --gpus N` launch from what its agent and
ranks wrote (RELIABILITY 391), and that cause written over the run record rank 0 left. The real
launch (a kill -9 of rank 1) is tests/reliability/test_failed_run_folder.py's."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from lorastudio.config import TrainConfig
from lorastudio.jobs import launch_report
from lorastudio.jobs.cli_record import open_cli_record
from lorastudio.jobs.launch_report import (
    launch_failure,
    launch_hung,
    note_rank_failure,
    note_rank_state,
    record_launch_failure,
    write_failures,
)
from lorastudio.jobs.store import RunStore
from lorastudio.settings import get_settings

GLOO = "RuntimeError: [../gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer"


@pytest.fixture
def launch_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(launch_report.LAUNCH_DIR_ENV, str(tmp_path))
    return tmp_path


def test_a_killed_rank_is_the_cause_not_rank_0s_broken_collective(launch_dir):
    note_rank_failure(0, GLOO)  # rank 0 saw the dead rank's connection close
    write_failures({0: (100, 1), 1: (101, -signal.SIGKILL)})
    assert launch_failure(launch_dir, 2) == (
        "rank 1 of 2 (pid 101) died without finishing (killed by SIGKILL); every process of the launch was stopped"
    )


def test_a_rank_that_crashed_without_an_error_of_its_own_is_the_cause(launch_dir):
    note_rank_failure(0, GLOO)
    write_failures({0: (100, 1), 2: (102, 139)})  # exit code, no rank2.error
    assert launch_failure(launch_dir, 3).startswith(
        "rank 2 of 3 (pid 102) died without finishing (exit code 139)"
    )


def test_a_ranks_own_error_is_the_cause_the_ranks_torchrun_stopped_are_not(launch_dir):
    note_rank_failure(1, "cannot use image shape_01.png: its pixels do not decode")
    note_rank_failure(0, GLOO)  # later: rank 1's exit broke rank 0's collective
    write_failures({0: (100, -signal.SIGTERM), 1: (101, 2)})
    assert (
        launch_failure(launch_dir, 2)
        == "rank 1 of 2 failed: cannot use image shape_01.png: its pixels do not decode"
    )


def test_nothing_written_names_nothing(launch_dir, monkeypatch):
    assert launch_failure(launch_dir, 2) is None
    monkeypatch.delenv(launch_report.LAUNCH_DIR_ENV)
    note_rank_failure(1, "x")  # outside a CLI launch: nothing written
    write_failures({1: (1, 1)})
    assert list(launch_dir.iterdir()) == []


def test_the_cause_replaces_rank_0s_error_in_the_record_but_not_a_finished_run(tiny_model, sample_dataset):
    raw = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": str(sample_dataset)}
    cfg = TrainConfig.model_validate({**raw, "output_name": "dp"})
    failed, done = open_cli_record(cfg, run_id="aaaaaaaaaaaa"), open_cli_record(cfg, run_id="bbbbbbbbbbbb")
    assert failed is not None and done is not None
    failed.fail(GLOO)
    done.end(stopped=True, steps_run=3, lora_path=None)
    failed.close()
    done.close()
    record_launch_failure("aaaaaaaaaaaa", "rank 1 of 2 (pid 101) died without finishing (killed by SIGKILL)")
    record_launch_failure("bbbbbbbbbbbb", "rank 1 of 2 failed: late")
    record_launch_failure("cccccccccccc", "no such record: nothing happens")
    store = RunStore.open(get_settings().db_path)
    try:
        runs = {r["id"]: r for r in store.list_runs()}
    finally:
        store.close()
    assert runs["aaaaaaaaaaaa"]["status"] == "failed"
    assert runs["aaaaaaaaaaaa"]["error"].startswith("rank 1 of 2 (pid 101) died")
    assert runs["bbbbbbbbbbbb"]["status"] == "stopped" and runs["bbbbbbbbbbbb"]["error"] is None
    assert sorted(runs) == ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]


def test_the_ranks_that_never_ended_after_a_stop_are_named(launch_dir, monkeypatch):
    """After a Ctrl-C, torchrun kills the ranks that did not end within 30 s: those that noted
    their start but not their end (RELIABILITY 394)."""
    for rank in (0, 1, 2):
        monkeypatch.setattr(launch_report.os, "getpid", lambda rank=rank: 200 + rank)
        note_rank_state(rank, "started")
    note_rank_state(0, "ended")
    assert launch_hung(launch_dir, 3) == (
        "rank 1 (pid 201), rank 2 (pid 202) of 3 did not end within 30 s of the stop and torchrun killed them "
        "(a rank that hangs holds the others in their next collective)"
    )
    note_rank_state(1, "ended")
    note_rank_state(2, "ended")
    assert launch_hung(launch_dir, 3) is None
