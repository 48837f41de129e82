"""The hang message of a data-parallel job names the rank that stopped answering: every rank
beats at its stop polls (jobs/rank_worker.py), the launcher notes when each was last heard
(jobs/rank_silence.py), and the job service's hang stop (jobs/pump.py) says which ranks went
silent, with their pids, and which still answer. Was: "the worker sent nothing..." only."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import jobs_fake_workers as fakes
import pytest
import torch
from tests.polling import until

from dp_jobs import FINAL, dp_config, wait_job
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.process import WorkerProcess
from lorastudio.jobs.rank_silence import RankSilence
from lorastudio.jobs.service import JobService, Timeouts
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings
from lorastudio.training.distributed import ParallelContext, StopPoll
from lorastudio.training.events import StopRequest

WATCH = {"hang_min_s": 1.0, "hang_step_factor": 5.0, "stop_grace_s": 0.5, "kill_grace_s": 0.5}


def test_the_silent_rank_is_named_with_its_pid_and_the_answering_ones() -> None:
    silence = RankSilence(world_size=3)
    silence.heard(0, 100, now=0.0)
    silence.heard(1, 101, now=0.0)
    silence.heard(2, 102, now=0.0)
    silence.heard(0, now=1900.0)
    silence.heard(2, now=1895.0)
    note = silence.note(1800.0, now=1901.0)
    assert note == (
        "silent: rank 1 (pid 101, last heard 1901 s ago) of 3; still answering: "
        "rank 0 (pid 100, last heard 1 s ago), rank 2 (pid 102, last heard 6 s ago)"
    )


def test_every_rank_silent_names_each_the_longest_silent_first_and_a_rank_never_connected() -> None:
    silence = RankSilence(world_size=2)
    silence.heard(0, 100, now=10.0)
    silence.heard(1, 101, now=5.0)
    assert silence.note(100.0, now=2000.0) == (
        "every rank of 2 is silent: rank 1 (pid 101, last heard 1995 s ago), "
        "rank 0 (pid 100, last heard 1990 s ago)"
    )
    lone = RankSilence(world_size=2)
    lone.heard(0, 100, now=0.0)
    assert (
        lone.note(100.0, now=500.0)
        == "silent: rank 0 (pid 100, last heard 500 s ago) of 2; never connected: rank 1"
    )
    assert RankSilence(world_size=2).note(1.0) is None


def test_every_rank_polls_its_stop_check() -> None:
    """A rank other than 0 polls its own check too (its beat), and still adopts rank 0's answer
    (not distributed here: its own request is the run's)."""
    polls: list[int] = []

    def check() -> StopRequest | None:
        polls.append(1)
        return None

    ctx = ParallelContext(rank=1, world_size=1)
    StopPoll(check, ctx, torch.device("cpu"))()
    assert polls == [1]


@pytest.fixture
def model(tiny_model: Callable[[str], Path], shapes: Path) -> Path:
    return tiny_model("flux")


def test_the_hang_message_names_the_silent_ranks(
    settings: Settings, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job service asks the job's worker which of its processes went silent (a launcher of
    ranks answers; here a one-process worker stands in for one) and says so in the hang stop."""
    asked: list[float] = []

    def note(self: WorkerProcess, silent_s: float) -> str:
        asked.append(silent_s)
        return "silent: rank 1 (pid 4242, last heard 3 s ago) of 2"

    monkeypatch.setattr(WorkerProcess, "silence_note", note)
    store = RunStore.open(settings.db_path)
    service = JobService(
        settings,
        store,
        GpuArbiter(),
        worker_target=fakes.steps_then_hang_ignoring_stop,
        timeouts=Timeouts(**WATCH),
    ).start()
    try:
        cfg = {"family": "flux", "base_model": str(model), "data_dir": "shapes", "resolution": 32, "steps": 3}
        job = service.submit(cfg)
        while (snap := service.job(job["id"]))["status"] not in {"failed", "stopped", "completed"}:
            time.sleep(0.02)
        assert snap["status"] == "failed", snap
        assert "sent nothing for" in snap["error"], snap["error"]
        assert "(silent: rank 1 (pid 4242, last heard 3 s ago) of 2)" in snap["error"], snap["error"]
        assert asked and asked[0] >= WATCH["hang_min_s"]
    finally:
        service.shutdown()


def test_a_running_two_rank_jobs_launcher_hears_every_rank(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    """2 gloo ranks through torchrun (settings.cpu_data_parallel), as GPU ranks run: while the
    step loop runs, the launcher has heard each rank within the last 1.5 s (rank 1's beats at its
    stop polls; it sends no events), and names both, with their pids, as silent past 0 s."""
    dp = settings.model_copy(update={"cpu_data_parallel": True})
    service = JobService(dp, RunStore.open(dp.db_path), GpuArbiter()).start()
    try:
        job = service.submit(dp_config(tiny_model("flux"), num_gpus=2, steps=100000, output_name="beats"))
        wait_job(service, job["id"], lambda s: (s["progress"] or {}).get("step", 0) >= 2, 120, "step 2")
        time.sleep(2.0)  # longer than the 1.5 s below: only beats keep a rank "heard"
        worker = service._worker
        assert worker is not None
        # every rank answers: each heard within 1.5 s at once (a loaded host: a beat may come later)
        until(lambda: worker.silence_note(1.5) is None, 60, "every rank heard within 1.5 s")
        pids = worker.rank_pids
        note = worker.silence_note(0.0) or ""
        assert note.startswith("every rank of 2 is silent: "), note
        assert f"rank 0 (pid {pids[0]}," in note and f"rank 1 (pid {pids[1]}," in note, note
        service.stop(save=False, job_id=job["id"])
        wait_job(service, job["id"], lambda s: s["status"] in FINAL, 60, "the stop")
    finally:
        service.shutdown()
