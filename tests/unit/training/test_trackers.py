"""Experiment trackers (report_to): refused naming the missing package (always tested: the
extras are not installed by default), off by default, and with TensorBoard installed a real run
writes loss, LR, grad norm, samples/s, memory and the sample images it rendered."""

from __future__ import annotations

import importlib.util

import pytest

from lorastudio.config import parse_train_config
from lorastudio.errors import ConfigError
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import get_settings
from lorastudio.training.loop import train
from lorastudio.training.trackers import tracker_problems

MISSING = [name for name in ("tensorboard", "wandb") if importlib.util.find_spec(name) is None]


def test_report_to_is_off_by_default_and_takes_only_known_trackers(tiny_model, small_dataset):
    base = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": str(small_dataset)}
    assert parse_train_config(base).report_to == []
    with pytest.raises(ConfigError) as err:
        parse_train_config({**base, "report_to": ["mlflow"]})
    assert [p.field for p in err.value.problems] == ["report_to.0"]


@pytest.mark.skipif(not MISSING, reason="every tracker package is installed here")
def test_a_tracker_whose_package_is_missing_is_refused_with_the_reason(
    make_config, tiny_model, small_dataset
):
    name = MISSING[0]
    (problem,) = tracker_problems([name])
    assert problem.field == "report_to"
    assert problem.message.startswith(f"{name} needs the {name} package, which is not installed")
    assert f"pip install 'lorastudio[{name}]'" in problem.message
    raw = {
        "family": "flux",
        "base_model": str(tiny_model("flux")),
        "data_dir": str(small_dataset),
        "report_to": [name],
    }
    with pytest.raises(ConfigError) as err:  # the job service / CLI check
        validate_run(raw, get_settings(), live_output_names=set(), allow_outside_root=True)
    assert any(p.field == "report_to" and name in p.message for p in err.value.problems)
    events: list = []
    with pytest.raises(ConfigError, match="report_to"):  # the engine's own preflight
        train(make_config(report_to=[name]), events.append, device="cpu")
    outputs = get_settings().outputs_dir
    assert events[-1].type == "error" and (not outputs.exists() or not any(outputs.iterdir()))


@pytest.mark.skipif(
    "tensorboard" in MISSING, reason="tensorboard is not installed (pip install 'lorastudio[tensorboard]')"
)
def test_tensorboard_gets_the_metrics_and_the_sample_images(make_config):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = make_config(
        report_to=["tensorboard"], sample_prompts=["a red circle"], sample_every=1, sample_steps=1,
        validation_split=0.25, validate_every=1,
    )  # fmt: skip
    result = train(cfg, [].append, device="cpu")
    acc = EventAccumulator(str(result.lora_path.parent / "tensorboard"), size_guidance={"images": 0})
    acc.Reload()
    tags = acc.Tags()
    for tag in ("train/loss", "train/avg_loss", "train/lr", "train/grad_norm", "perf/peak_memory_gb"):
        assert [e.step for e in acc.Scalars(tag)] == [1, 2], tag
    assert [e.value for e in acc.Scalars("train/loss")] == pytest.approx(result.losses)
    assert [e.step for e in acc.Images("samples/0")] == [1, 2] and "samples/0" in tags["images"]
    assert [e.step for e in acc.Scalars("validation/loss")] == [1, 2]


def test_a_validation_round_reaches_every_tracker_as_scalars():
    """The Validated event (training/validate.py) is written as validation/loss and
    validation/best_loss at its step, whichever tracker is open (a recording writer here: the
    tracker packages are optional extras)."""
    from lorastudio.training.events import Validated
    from lorastudio.training.trackers import TrackerSink

    class Recorder:
        name = "recorder"

        def __init__(self) -> None:
            self.calls: list[tuple[dict[str, float], int]] = []

        def scalars(self, values: dict[str, float], step: int) -> None:
            self.calls.append((values, step))

    sink, writer = TrackerSink([]), Recorder()
    sink._writers = [writer]
    sink.write(Validated(step=20, loss=0.25, images=3, best_step=10, best_loss=0.2))
    assert writer.calls == [({"validation/loss": 0.25, "validation/best_loss": 0.2}, 20)]
