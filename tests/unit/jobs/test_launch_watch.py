"""The hang watch of a `lorastudio train --gpus N` launch (jobs/launch_watch.py, the command's
side; jobs/rank_watch.py, a rank's): the job service's step watch and rank beats on a CLI
launch. Its decision: no hang before rank 0's first step, nor while announced work runs, nor once
a stop was asked for; past the allowance the reason names the silent rank first, with its pid.
Its wire: real ranks' watches over the launch folder's socket (no torch). The real launch (a
SIGSTOPped gloo rank) is tests/unit/training/test_cli_hang.py's (slow), as is a hung one-process
run's (cli/self_watch.py: the same watch in a thread of the run's process, decided here too).
Was: no watch at all (RELIABILITY 985, 986)."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from rich.console import Console

from lorastudio.cli.self_watch import SelfWatch
from lorastudio.config import TrainConfig
from lorastudio.jobs import launch_report
from lorastudio.jobs.launch_watch import LaunchWatch
from lorastudio.jobs.process import Timeouts
from lorastudio.jobs.rank_watch import RankWatch, connect_rank_watch
from lorastudio.training.events import ModelLoadStarted, Progress, StopRequest
from polling import until

TIMEOUTS = Timeouts(hang_min_s=10.0, hang_step_factor=4.0)


def _progress(step: int, total: int = 100) -> Progress:
    return Progress(
        step=step, total_steps=total, epoch=0, loss=0.1, avg_loss=0.1, lr=1e-4, grad_norm=None,
        samples_per_second=None, peak_memory_gb=None, skipped_steps=0,
    )  # fmt: skip


def _step(watch: LaunchWatch, step: int, now: float) -> None:
    watch.saw(0, {"kind": "event", "data": {"type": "progress", "step": step}}, now)


def test_silence_counts_only_in_the_step_loop_and_names_the_rank_silent_first() -> None:
    watch = LaunchWatch(Path("/nonexistent"), 2, TIMEOUTS)
    watch.silence.heard(0, 100, now=0.0)
    watch.silence.heard(1, 101, now=0.0)
    watch.saw(0, {"kind": "event", "data": {"type": "model_load_started"}}, 1.0)
    assert watch.hung(5000.0) is None  # loading, caching, compile, the first step: not watched
    _step(watch, 1, 100.0)
    _step(watch, 2, 102.0)  # a 2 s step: allowance max(10, 4 x 2) = 10 s
    watch.saw(1, {"kind": "beat"}, 101.0)
    assert watch.hung(111.0) is None
    reason = watch.hung(113.0)
    assert reason is not None and reason.startswith("the worker sent nothing for 11 s after step 2"), reason
    # rank 1 went silent first (its last beat at 101 s), then rank 0 (its step 2 at 102 s)
    assert reason.endswith(
        "(every rank of 2 is silent: rank 1 (pid 101, last heard 12 s ago), "
        "rank 0 (pid 100, last heard 11 s ago))"
    ), reason
    watch.request_stop()  # the stop path's deadlines apply from here
    assert watch.hung(10_000.0) is None


def test_announced_work_is_not_timed_and_rank_1s_beats_say_it_answers() -> None:
    watch = LaunchWatch(Path("/nonexistent"), 2, TIMEOUTS)
    _step(watch, 1, 0.0)
    _step(watch, 2, 1.0)
    watch.saw(0, {"kind": "event", "data": {"type": "busy", "work": "checkpoint", "step": 2}}, 1.0)
    assert watch.hung(3000.0) is None  # a checkpoint (or a sample round) of any length
    watch.saw(0, {"kind": "event", "data": {"type": "busy", "work": None, "step": None}}, 3000.0)
    _step(watch, 3, 3001.0)  # the 3000 s around the checkpoint are no step's time
    assert watch.watch.slowest_step_s == 1.0
    watch.saw(1, {"kind": "beat"}, 3005.0)  # rank 1 answers; rank 0 does not
    reason = watch.hung(3012.0)
    assert reason is not None and "after step 3" in reason, reason
    assert "(silent: rank 0 (pid ?, last heard 11 s ago) of 2; still answering: rank 1" in reason, reason
    watch.saw(0, {"kind": "event", "data": {"type": "complete"}}, 3013.0)
    assert watch.hung(9000.0) is None  # the run ended: its ranks' exit is not a hang


@pytest.fixture
def config() -> TrainConfig:
    return TrainConfig.model_validate(
        {"family": "flux", "base_model": "x", "data_dir": "y", "steps": 9, "save_every": 3}
    )


def test_ranks_report_over_the_launch_folder_and_rank_0_takes_the_hang_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: TrainConfig
) -> None:
    assert connect_rank_watch(0, config) is None  # not a rank of a CLI launch: unwatched
    monkeypatch.setenv(launch_report.LAUNCH_DIR_ENV, str(tmp_path))
    assert connect_rank_watch(0, config) is None  # no command listening: unwatched
    watch = LaunchWatch(tmp_path, 2, TIMEOUTS).start()
    ranks: list[RankWatch] = []
    try:
        rank0, rank1 = connect_rank_watch(0, config), connect_rank_watch(1, config)
        assert rank0 is not None and rank1 is not None
        ranks += [rank0, rank1]
        shown: list[str] = []
        emit = rank0.wrap_emit(lambda event: shown.append(event.type))
        check0 = rank0.wrap_check(lambda: None)
        check1 = rank1.wrap_check(lambda: None)
        emit(ModelLoadStarted(component="transformer"))
        emit(_progress(1))
        assert check0() is None and check1() is None  # each beats
        emit(_progress(3))  # a checkpoint is due after step 3 (save_every 3): announced
        until(lambda: watch.run.busy == {"work": "checkpoint", "step": 3}, 10, "the checkpoint announced")
        assert shown == ["model_load_started", "progress", "progress"]  # the command's own sink too
        assert list(watch.run.saw)[:3] == ["model_load_started", "progress", "progress"]
        until(lambda: sorted(watch.rank_pids) == [0, 1], 10, "both ranks registered")  # own threads
        until(lambda: watch.silence.note(3600.0) is None and len(watch.rank_pids) == 2, 10, "both heard")
        assert check0() is None
        until(lambda: watch.run.busy is None, 10, "the checkpoint's end")  # back at the stop poll
        watch.request_stop()
        until(lambda: check0() == StopRequest(save=True), 10, "the hang stop at rank 0's poll")
    finally:
        for rank in ranks:
            rank.close()
        watch.close()


def test_a_one_process_run_is_asked_to_stop_then_ended_as_hung(config: TrainConfig) -> None:
    """cli/self_watch.py (RELIABILITY 986): the same decision on the run of this process; past
    the allowance a stop-and-save at its next poll, past the stop path's deadline (stop grace,
    kill grace) the end of the process (here: noted)."""
    ended: list[int] = []
    out = io.StringIO()
    timeouts = Timeouts(hang_min_s=10.0, hang_step_factor=4.0, stop_grace_s=1.0, kill_grace_s=1.0)
    watch = SelfWatch(config, None, None, Console(file=out), timeouts, end=ended.append)
    shown: list[str] = []
    emit, check = watch.wrap_emit(lambda event: shown.append(event.type)), watch.wrap_check(lambda: None)
    emit(ModelLoadStarted(component="transformer"))
    watch.tick(time.monotonic() + 5000)  # before the first step: not timed
    assert watch.reason is None
    emit(_progress(1))
    emit(_progress(3))  # a checkpoint is due (save_every 3): announced, not timed
    watch.tick(time.monotonic() + 5000)
    assert watch.reason is None and check() is None  # the poll: the checkpoint's end
    at = time.monotonic()
    watch.tick(at + 5)
    assert watch.reason is None
    watch.tick(at + 30)
    assert watch.reason is not None and "after step 3" in watch.reason, watch.reason
    assert "asking it to stop and save" in out.getvalue()
    watch.tick(at + 31.5)  # the stop grace (1 s) passed, the kill grace (1 s) not yet
    assert ended == []
    watch.tick(at + 32.5)
    assert ended == [1] and "error: " + watch.reason in out.getvalue().replace("\n", "")
    assert shown == ["model_load_started", "progress", "progress"]


def test_a_slow_step_that_answered_the_stop_says_why_it_stopped(config: TrainConfig) -> None:
    out = io.StringIO()
    watch = SelfWatch(config, None, None, Console(file=out), TIMEOUTS, end=lambda code: None)
    check = watch.wrap_check(lambda: None)
    watch.wrap_emit(lambda event: None)(_progress(1))
    watch.tick(time.monotonic() + 60)
    assert check() == StopRequest(save=True)  # the run's next poll stops and saves: it answers
    watch.tick(time.monotonic() + 600)  # saving the stop's checkpoint and LoRA: within busy_grace_s
    assert watch.answered() == watch.reason and watch.reason is not None
    assert out.getvalue().replace("\n", "").count(f"error: {watch.reason}") == 1  # not ended: answered
    idle = SelfWatch(config, None, None, Console(file=io.StringIO()), TIMEOUTS, end=lambda code: None)
    assert idle.answered() is None
