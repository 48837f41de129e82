"""A run's trackers across sessions and keys (session 30): a resume from a checkpoint older than
the last logged step starts its trackers at the step after the checkpoint's (TensorBoard purges
the killed session's later steps: RELIABILITY 861), and the studio's W&B key (its settings, as
the job service's worker gets them) reaches the tracker that starts wandb (RELIABILITY 860).
The default tests record what the run hands each tracker's writer factory (the tracker
packages are optional extras); with TensorBoard installed a real run's event files are read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lorastudio import config_host
from lorastudio.settings import get_settings
from lorastudio.training import trackers
from lorastudio.training.loop import train
from stop_at import stop_at


class Recorder:
    """A writer factory's writer that records what it was made with and the steps it got."""

    name = "wandb"
    made: list[Recorder] = []

    def __init__(self, run_dir: Path, config: dict[str, Any], first_step: int, key: Any) -> None:
        self.first_step, self.key, self.steps = first_step, key, []
        Recorder.made.append(self)

    def scalars(self, values: dict[str, float], step: int) -> None:
        self.steps.append(step)

    def images(self, paths: list[Path], step: int) -> None:
        pass

    def close(self) -> None:
        pass


def _killed_after_its_checkpoint(make_config, **settings: Any) -> tuple[Path, list[float]]:
    """A 3-step run stopped after step 2, checkpoints after steps 1 and 2: (its step-1
    checkpoint, its losses). Resumed from step 1 it is a session killed after logging step 2."""
    events, stop = stop_at(2)
    cfg = make_config(steps=3, save_every=1, keep_last=3, output_name="run", **settings)
    first = train(cfg, events.append, stop, device="cpu")
    assert first.stopped and first.steps_run == 2
    return get_settings().outputs_dir / "run" / "checkpoints" / "step-000001", first.losses


def test_a_resume_starts_its_trackers_after_its_checkpoint_with_the_studios_wandb_key(
    make_config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LORASTUDIO_WANDB_API_KEY", "wk-0123456789")  # the studio's key (its settings)
    get_settings.cache_clear()
    monkeypatch.setitem(config_host.TRACKERS, "wandb", ("json", "wandb"))  # "installed"
    monkeypatch.setitem(trackers.WRITERS, "wandb", Recorder)
    monkeypatch.setattr(Recorder, "made", [])
    checkpoint, _ = _killed_after_its_checkpoint(make_config, report_to=["wandb"])
    resumed = train(make_config(steps=3, report_to=["wandb"]), [].append, device="cpu", resume=checkpoint)
    assert resumed.resumed_from == 1
    first, second = Recorder.made
    assert (first.first_step, first.steps) == (1, [1, 2])
    assert (second.first_step, second.steps) == (2, [2, 3])  # from the step after the checkpoint's
    assert [w.key.get_secret_value() for w in (first, second)] == ["wk-0123456789"] * 2


def test_a_tensorboard_writer_of_a_resume_purges_the_steps_after_its_checkpoint(tmp_path: Path) -> None:
    assert trackers.tensorboard_arguments(tmp_path, 1) == {
        "log_dir": str(tmp_path / "tensorboard"),
        "purge_step": None,
    }
    assert trackers.tensorboard_arguments(tmp_path, 101)["purge_step"] == 101


def test_tensorboard_draws_each_step_of_a_resumed_run_once(make_config) -> None:
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (lorastudio[tensorboard])")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    checkpoint, killed = _killed_after_its_checkpoint(make_config, report_to=["tensorboard"])
    resumed = train(
        make_config(steps=3, report_to=["tensorboard"]), [].append, device="cpu", resume=checkpoint
    )
    folder = checkpoint.parent.parent / "tensorboard"
    assert len(list(folder.glob("events.out.tfevents.*"))) == 2  # one per session
    acc = EventAccumulator(str(folder))
    acc.Reload()
    losses = acc.Scalars("train/loss")
    assert [e.step for e in losses] == [1, 2, 3]  # was [1, 2, 2, 3]: the killed session's step 2 too
    assert [e.value for e in losses] == pytest.approx([killed[0], *resumed.losses[1:]])
