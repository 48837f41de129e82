"""jobs/busy.py: what the worker reports as work in flight after each engine event and stop
check, and the stop deadline the service derives from it."""

from __future__ import annotations

from pathlib import Path

from lorastudio.config import parse_train_config
from lorastudio.jobs.busy import (
    CHECKPOINT,
    FINAL_SAVE,
    SAMPLE_ROUND,
    STOP_SAVE,
    VALIDATION_ROUND,
    BusyTracker,
    stop_deadline,
)
from lorastudio.jobs.process import Timeouts
from lorastudio.training.events import Progress, SampleReady, StopRequest, Validated


def _progress(step: int, total: int = 10) -> Progress:
    return Progress(
        step=step, total_steps=total, epoch=0, loss=0.1, avg_loss=0.1, lr=1e-4, grad_norm=None,
        samples_per_second=None, peak_memory_gb=None,
    )  # fmt: skip


def test_the_tracker_reports_sample_rounds_checkpoints_and_the_saves(tmp_path: Path) -> None:
    cfg = parse_train_config(
        {"family": "flux", "base_model": str(tmp_path), "data_dir": str(tmp_path), "steps": 10,
         "sample_prompts": ["x"], "sample_every": 4, "save_every": 2}
    )  # fmt: skip
    busy = BusyTracker(cfg)
    assert busy.after_event(_progress(1)) is None and busy.after_poll(None) is None
    assert busy.after_event(_progress(2)) == {"type": "busy", "work": CHECKPOINT, "step": 2}
    assert busy.after_poll(None) == {"type": "busy", "work": None, "step": None}
    assert busy.after_event(_progress(4))["work"] == f"{SAMPLE_ROUND} + {CHECKPOINT}"
    assert busy.after_event(SampleReady(step=4, images=["a.png"]))["work"] == CHECKPOINT
    assert busy.after_poll(StopRequest(save=True))["work"] == STOP_SAVE
    assert busy.after_event(_progress(10))["work"] == f"{SAMPLE_ROUND} + {FINAL_SAVE}"
    assert busy.after_poll(StopRequest(save=False)) is None  # a discard writes nothing


def test_the_tracker_reports_validation_rounds(tmp_path: Path) -> None:
    cfg = parse_train_config(
        {"family": "flux", "base_model": str(tmp_path), "data_dir": str(tmp_path), "steps": 10,
         "validation_split": 0.2, "validate_every": 5, "sample_prompts": ["x"], "sample_every": 5}
    )  # fmt: skip
    busy = BusyTracker(cfg)
    assert busy.after_event(_progress(4)) is None
    assert busy.after_event(_progress(5))["work"] == f"{SAMPLE_ROUND} + {VALIDATION_ROUND}"
    assert busy.after_event(SampleReady(step=5, images=["a.png"]))["work"] == VALIDATION_ROUND
    done = Validated(step=5, loss=0.2, images=2, best_step=5, best_loss=0.2)
    assert busy.after_event(done) == {"type": "busy", "work": None, "step": 5}


def test_the_stop_deadline_covers_the_work_in_flight_up_to_a_bound() -> None:
    t = Timeouts(stop_grace_s=30, busy_grace_s=900)
    assert stop_deadline(None, None, None, t) is None
    assert stop_deadline(100.0, None, None, t) == 130.0
    assert stop_deadline(100.0, {"work": SAMPLE_ROUND}, 90.0, t) == 1000.0  # waits, bounded
    assert stop_deadline(100.0, None, 160.0, t) == 190.0  # the grace starts when the work ended
    assert stop_deadline(100.0, None, 50.0, t) == 130.0  # work that ended before the stop
