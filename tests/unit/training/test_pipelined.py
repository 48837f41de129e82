"""The pipelined optimizer loop (training/optimize.py: on CUDA a step's loss and gradient norm
are read only after the next step is queued, and non-finite steps are skipped by the device),
forced on for the CPU here: it must train bitwise like the unpipelined loop, stop and resume
exactly, and skip and count non-finite steps the same way."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import load_file

from lorastudio import families
from lorastudio.errors import TrainingDiverged
from lorastudio.settings import get_settings
from lorastudio.training import optimize
from lorastudio.training.events import StopRequest
from lorastudio.training.loop import TrainResult, train
from lorastudio.training.resume.checkpoint import list_checkpoints

SETTINGS = {"steps": 6, "random_flip": True, "caption_dropout": 0.3, "lr_scheduler": "cosine"}


@pytest.fixture
def pipelined(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(optimize, "PIPELINED_DEVICES", ("cuda", "cpu"))


def _weights(result: TrainResult) -> dict[str, torch.Tensor]:
    assert result.lora_path is not None
    return load_file(str(result.lora_path))


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and bool(a) and all(torch.equal(a[k], b[k]) for k in a)


def _queued_before_read(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Log of 'launch N' (a step's update queued) and 'read N' (its values read on the host)."""
    log: list[str] = []
    apply, read = optimize.StepInFlight.apply_on_device, optimize.StepInFlight.read

    def logged_apply(self, optimizer, scheduler, *rest):
        log.append(f"launch {self.step}")
        return apply(self, optimizer, scheduler, *rest)

    def logged_read(self):
        log.append(f"read {self.step}")
        return read(self)

    monkeypatch.setattr(optimize.StepInFlight, "apply_on_device", logged_apply)
    monkeypatch.setattr(optimize.StepInFlight, "read", logged_read)
    return log


@pytest.mark.parametrize("family", ["flux", "sdxl"])
def test_pipelined_steps_train_bitwise_like_the_unpipelined_loop(family, make_config, monkeypatch):
    plain = train(make_config(family, output_name="plain", **SETTINGS), [].append, device="cpu")
    monkeypatch.setattr(optimize, "PIPELINED_DEVICES", ("cuda", "cpu"))
    log = _queued_before_read(monkeypatch)
    cfg = make_config(family, output_name="piped", save_every=3, **SETTINGS)
    events: list = []
    piped = train(cfg, events.append, device="cpu")
    # step N+1 is queued before step N is read, except around the checkpoint (3) and the end (6)
    assert log == [
        "launch 1", "launch 2", "read 1", "launch 3", "read 2", "read 3",
        "launch 4", "launch 5", "read 4", "launch 6", "read 5", "read 6",
    ]  # fmt: skip
    assert [e.step for e in events if e.type == "progress"] == [1, 2, 3, 4, 5, 6]
    assert piped.losses == plain.losses and _same(_weights(plain), _weights(piped))


def test_a_stop_read_while_the_next_step_is_queued_lands_after_it_and_resumes_exactly(make_config, pipelined):
    full = train(make_config(output_name="full", **SETTINGS), [].append, device="cpu")
    events: list = []

    def stop_after_2() -> StopRequest | None:
        done = [e.step for e in events if e.type == "progress"]
        return StopRequest(save=True) if done and done[-1] >= 2 else None

    first = train(make_config(output_name="part", **SETTINGS), events.append, stop_after_2, device="cpu")
    assert first.stopped and first.steps_run == 3 and first.losses == full.losses[:3]
    run_dir = get_settings().outputs_dir / "part"
    assert [p.name for p in list_checkpoints(run_dir)] == ["step-000003"]
    resumed = train(make_config(output_name="part", **SETTINGS), [].append, device="cpu", resume=run_dir)
    assert resumed.resumed_from == 3 and resumed.losses == full.losses
    assert _same(_weights(full), _weights(resumed))


@pytest.fixture
def nan_at(monkeypatch: pytest.MonkeyPatch) -> set[int]:
    """FLUX.1's prediction turns NaN on the steps in the returned set (counted by calls: one
    forward per step here)."""
    flux = families.get("flux")
    predict = flux.predict
    bad: set[int] = set()
    calls = [0]

    def nan_predict(denoiser, noisy, noise_level, cond, batch_info, cfg):
        calls[0] += 1
        pred = predict(denoiser, noisy, noise_level, cond, batch_info, cfg)
        return pred * float("nan") if calls[0] in bad else pred

    monkeypatch.setattr(flux, "predict", nan_predict)
    return bad


def test_a_non_finite_step_is_skipped_by_the_device_as_the_guard_would(make_config, nan_at, monkeypatch):
    nan_at.add(3)
    cfg = make_config(family="flux", batch_size=4, steps=5, output_name="plain")
    plain_events: list = []
    plain = train(cfg, plain_events.append, device="cpu")
    monkeypatch.setattr(optimize, "PIPELINED_DEVICES", ("cuda", "cpu"))
    nan_at.clear()  # the call counter keeps counting: step 3 of the second run is call 8
    nan_at.add(8)
    events: list = []
    piped = train(cfg.model_copy(update={"output_name": "piped"}), events.append, device="cpu")
    skipped = [[e.skipped_steps for e in evs if e.type == "progress"] for evs in (plain_events, events)]
    assert skipped[0] == skipped[1] == [0, 0, 1, 1, 1]
    assert math.isnan(piped.losses[2]) and piped.losses[:2] == plain.losses[:2]
    assert piped.losses[3:] == plain.losses[3:] and _same(_weights(plain), _weights(piped))


def test_bad_steps_in_a_row_still_fail_the_run(make_config, nan_at, pipelined):
    nan_at.update({3, 4, 5})
    cfg = make_config(family="flux", batch_size=4, steps=8, max_bad_steps=2)
    with pytest.raises(TrainingDiverged, match="training diverged at step 4"):
        train(cfg, [].append, device="cpu")


def test_a_stop_without_save_read_while_a_checkpoint_step_is_queued_leaves_nothing(make_config, pipelined):
    events: list = []

    def stop_after_2() -> StopRequest | None:
        done = [e.step for e in events if e.type == "progress"]
        return StopRequest(save=False) if done and done[-1] >= 2 else None

    cfg = make_config(output_name="part", save_every=3, **SETTINGS)  # step 3 is queued at the stop
    result = train(cfg, events.append, stop_after_2, device="cpu")
    assert result.stopped and result.steps_run == 3 and result.lora_path is None
    assert not (get_settings().outputs_dir / "part").exists()  # as an unpipelined stop without save
