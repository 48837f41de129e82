"""Divergence policy on the tiny FLUX.1 model: a non-finite step is skipped (no update) and
counted; max_bad_steps in a row fail the run as diverged, no LoRA is written, and the last good
checkpoint stays resumable. Divergence is injected by a family whose prediction turns NaN."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import load_file

from lorastudio import families
from lorastudio.errors import TrainingDiverged
from lorastudio.settings import get_settings
from lorastudio.training.events import StopRequest
from lorastudio.training.loop import train
from lorastudio.training.resume.checkpoint import list_checkpoints


@pytest.fixture
def nan_steps(monkeypatch: pytest.MonkeyPatch) -> tuple[set[int], list]:
    """Wraps the FLUX.1 family's prediction (for this test only) so that it is NaN during the
    steps in the returned set (a step = the number of progress events in the returned list + 1)."""
    flux = families.get("flux")
    predict = flux.predict
    bad: set[int] = set()
    events: list = []

    def nan_predict(denoiser, noisy, noise_level, cond, batch_info, cfg):
        pred = predict(denoiser, noisy, noise_level, cond, batch_info, cfg)
        step = sum(e.type == "progress" for e in events) + 1
        return pred * float("nan") if step in bad else pred

    monkeypatch.setattr(flux, "predict", nan_predict)
    return bad, events


def _config(make_config, **overrides):
    return make_config(family="flux", batch_size=4, **overrides)


def test_a_non_finite_step_is_skipped_and_counted(make_config, nan_steps):
    bad, events = nan_steps
    bad.add(3)
    cfg = _config(make_config, steps=5, save_every=1, keep_last=10)

    def stop_after_step_3() -> StopRequest | None:
        return StopRequest(save=True) if sum(e.type == "progress" for e in events) >= 3 else None

    train(cfg, events.append, stop_after_step_3, device="cpu")
    progress = [e for e in events if e.type == "progress"]
    assert [e.skipped_steps for e in progress] == [0, 0, 1]
    # said where a server run's user reads it: the record's warnings, the run's log (RELIABILITY 1904)
    [warning] = [e for e in events if e.type == "warning"]
    assert warning.step == 3 and warning.message.startswith("1 step was skipped so far (no update)")
    assert (
        "step 3 (loss nan" in warning.message
        and f"after {cfg.max_bad_steps} in a row (max_bad_steps)" in warning.message
    )
    assert math.isnan(progress[2].loss) and all(math.isfinite(e.loss) for e in progress[:2])
    run_dir = get_settings().outputs_dir / "run"
    weights = {p.name: load_file(str(p / "lora.safetensors")) for p in list_checkpoints(run_dir)}
    after_2, after_3 = weights["step-000002"], weights["step-000003"]  # step 3: the stop-and-save one
    assert all(torch.equal(after_2[k], after_3[k]) for k in after_2)  # no update at step 3

    events.clear()
    train(cfg, events.append, device="cpu", resume=run_dir)
    assert [e.skipped_steps for e in events if e.type == "progress"] == [1, 1]  # carried over
    after_4 = load_file(str(run_dir / "checkpoints" / "step-000004" / "lora.safetensors"))
    assert not all(torch.equal(after_3[k], after_4[k]) for k in after_3)  # step 4 trains again


def test_max_bad_steps_in_a_row_fail_the_run_and_the_last_good_checkpoint_resumes(make_config, nan_steps):
    bad, events = nan_steps
    bad.update({3, 4, 5, 6})
    cfg = _config(make_config, steps=8, save_every=2, keep_last=5, max_bad_steps=3)
    with pytest.raises(TrainingDiverged, match="training diverged at step 5"):
        train(cfg, events.append, device="cpu")
    assert events[-1].type == "error" and "training diverged at step 5" in events[-1].message
    assert [e.skipped_steps for e in events if e.type == "progress"] == [0, 0, 1, 2]
    run_dir = get_settings().outputs_dir / "run"
    # the folder is kept for its checkpoints; step 4 (mid-streak) was not checkpointed; no LoRA
    assert [p.name for p in list_checkpoints(run_dir)] == ["step-000002"]
    assert not list(run_dir.glob("*.safetensors")) and not list(run_dir.glob("*.json"))

    bad.clear()
    resumed_events: list = []
    events.clear()
    resumed = train(cfg, lambda e: (events.append(e), resumed_events.append(e)), device="cpu", resume=run_dir)
    assert resumed.resumed_from == 2 and resumed.steps_run == 8 and resumed.lora_path.is_file()
    assert [e.step for e in resumed_events if e.type == "progress"] == [3, 4, 5, 6, 7, 8]


def test_divergence_without_a_checkpoint_removes_the_run_folder(make_config, nan_steps):
    bad, events = nan_steps
    bad.update({1, 2})
    with pytest.raises(TrainingDiverged, match="training diverged at step 2"):
        train(_config(make_config, steps=4, max_bad_steps=2), events.append, device="cpu")
    assert not (get_settings().outputs_dir / "run").exists()
