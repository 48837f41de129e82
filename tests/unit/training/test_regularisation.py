"""Regularisation entries (issue 29 part 2) on the tiny FLUX.1 (CPU): a reg entry's samples are
mixed by its repeats like any entry, their loss is multiplied by prior_loss_weight and they never
get the run's trigger word (bitwise the run of a plain entry with that loss weight and no
trigger), the preflight and sidecar name it, a reg run resumes bitwise and a resume with another
prior_loss_weight is refused; prior_loss_weight without a reg entry, or only reg entries, refused;
prior_prediction makes the base model's prediction the target of a reg entry's samples."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lorastudio.config import TrainConfig
from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings
from lorastudio.training.events import StopRequest
from lorastudio.training.loop import TrainResult, train
from lorastudio.training.preflight import preflight


@pytest.fixture(scope="module")
def subject_and_class(small_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """small_dataset split in two: 2 subject images and 2 class images, each with its captions."""
    root = tmp_path_factory.mktemp("reg")
    subject, klass = root / "subject", root / "class"
    subject.mkdir()
    klass.mkdir()
    for n, img in enumerate(sorted(small_dataset.glob("*.png"))):
        to = subject if n < 2 else klass
        shutil.copy(img, to / img.name)
        shutil.copy(img.with_suffix(".txt"), to / f"{img.stem}.txt")
    return subject, klass


def _cfg(make_config: Callable[..., TrainConfig], entries: list[dict], **kw: object) -> TrainConfig:
    base = {"steps": 4, "batch_size": 1, "seed": 3}
    return make_config("flux", data_dir=None, datasets=entries, **{**base, **kw})


def _weights(result: TrainResult) -> list[torch.Tensor]:
    assert result.lora_path is not None
    return list(load_file(str(result.lora_path)).values())


def test_a_reg_entry_is_an_entry_with_the_prior_loss_weight_and_no_trigger(
    make_config, subject_and_class
) -> None:
    subject, klass = subject_and_class
    reg = [{"path": str(subject)}, {"path": str(klass), "repeats": 2, "regularisation": True}]
    cfg = _cfg(make_config, reg, trigger_word="sks", prior_loss_weight=2.5, output_name="reg")
    run = preflight(cfg, get_settings(), "cpu")
    captions = {it.entry: it.caption for it in run.scan.items}
    assert captions[0].startswith("sks") and "sks" not in captions[1]  # the class images: no trigger
    assert [it.entry for it in run.scan.items].count(1) == 2  # its images, sampled x2 by the mix
    with_reg = train(cfg, [].append, device="cpu")
    # the same run spelled as plain entries: the trigger on the subject, the class's loss x 2.5
    plain = [
        {"path": str(subject), "trigger_word": "sks"},
        {"path": str(klass), "repeats": 2, "loss_weight": 2.5},
    ]
    same = train(_cfg(make_config, plain, output_name="plain"), [].append, device="cpu")
    assert with_reg.losses == same.losses
    assert all(torch.equal(x, y) for x, y in zip(_weights(with_reg), _weights(same), strict=True))
    light = train(_cfg(make_config, reg, trigger_word="sks", output_name="light"), [].append, device="cpu")
    assert light.losses != with_reg.losses  # prior_loss_weight 1: another run
    sidecar = json.loads(with_reg.lora_path.with_suffix(".json").read_text())
    entry = sidecar["dataset"]["entries"][1]
    assert (entry["regularisation"], entry["loss_weight"], entry["repeats"]) == (True, 2.5, 2)
    assert "regularisation" not in sidecar["dataset"]["entries"][0]


def test_a_reg_run_resumes_bitwise_and_refuses_another_prior_loss_weight(
    make_config, subject_and_class
) -> None:
    subject, klass = subject_and_class
    reg = [{"path": str(subject), "weight": 1.0}, {"path": str(klass), "weight": 1.0, "regularisation": True}]
    extra = {"prior_loss_weight": 0.5, "steps": 5}
    full = train(_cfg(make_config, reg, output_name="full", **extra), [].append, device="cpu")
    events: list = []

    def stop() -> StopRequest | None:
        done = [e for e in events if e.type == "progress"]
        return StopRequest(save=True) if done and done[-1].step >= 2 else None

    cfg = _cfg(make_config, reg, output_name="part", **extra)
    assert train(cfg, events.append, stop, device="cpu").stopped
    run_dir = get_settings().outputs_dir / "part"
    resumed = train(cfg, [].append, device="cpu", resume=run_dir)
    assert resumed.losses == full.losses
    assert all(torch.equal(x, y) for x, y in zip(_weights(full), _weights(resumed), strict=True))
    other = _cfg(make_config, reg, output_name="part", prior_loss_weight=0.7, steps=6)
    with pytest.raises(ConfigError, match="prior_loss_weight: differs from the checkpoint"):
        train(other, [].append, device="cpu", resume=run_dir)


def test_prior_loss_weight_needs_a_reg_entry_and_a_run_needs_a_subject(
    make_config, subject_and_class
) -> None:
    subject, klass = subject_and_class
    with pytest.raises(ConfigError, match="prior_loss_weight: needs a datasets entry with regularisation"):
        train(make_config("flux", prior_loss_weight=2.0), [].append, device="cpu")
    only_reg = [{"path": str(klass), "regularisation": True}]
    with pytest.raises(ConfigError, match="every entry is a regularisation entry"):
        train(_cfg(make_config, only_reg), [].append, device="cpu")


def test_a_prior_prediction_entry_targets_the_base_prediction(tiny_model) -> None:
    """prior_prediction (OneTrainer's): the marked samples' target is the base model's prediction
    on their own noisy latents (the LoRA disabled), the others keep the noise target. A fresh LoRA
    (B = 0) predicts as the base: those samples' loss is exactly 0."""
    import methods_cases

    from lorastudio.training.distributed import ParallelContext
    from lorastudio.training.inputs.latents import LatentBatch
    from lorastudio.training.planning.micro_batches import batch_forward_backward
    from lorastudio.training.preservation import base_prediction
    from lorastudio.training.step import weighted_loss_share

    cfg = methods_cases.mini_config("flux", tiny_model("flux"))
    mb = methods_cases.mini_batch(cfg)
    info = mb.info
    batch = LatentBatch(mb.latents, info["original_size"], info["crop_top_left"], info["target_size"])
    scaler = torch.amp.GradScaler("cpu", enabled=False)

    def loss(prior: torch.Tensor | None) -> float:
        shares = batch_forward_backward(
            mb.family, mb.denoiser, mb.objective, batch, mb.cond, cfg, torch.Generator().manual_seed(5), 2,
            scaler, 2, ctx=ParallelContext(), prior=prior,
        )  # fmt: skip
        return float(sum(shares))

    assert loss(torch.tensor([True, True])) == 0.0  # the LoRA starts as the base
    assert loss(None) > 0
    with torch.no_grad():
        for p in mb.params:
            p.normal_(std=0.05)
    noised = mb.objective.noise(mb.latents, torch.Generator().manual_seed(5))  # the same draws
    with torch.no_grad():
        pred = mb.family.predict(mb.denoiser, noised.noisy, noised.noise_level, mb.cond, info, cfg)
    base = base_prediction(mb.family, mb.denoiser, noised.noisy, noised.noise_level, mb.cond, info, cfg)
    by_hand = weighted_loss_share(pred[:1], base[:1].float(), noised.weight[:1], 2) + weighted_loss_share(
        pred[1:], noised.target[1:], noised.weight[1:], 2
    )
    assert loss(torch.tensor([True, False])) == pytest.approx(float(by_hand), rel=1e-5)


def test_prior_prediction_needs_a_regularisation_entry(make_config, subject_and_class) -> None:
    subject, klass = subject_and_class
    entries = [{"path": str(subject), "prior_prediction": True}, {"path": str(klass)}]
    with pytest.raises(ConfigError, match="datasets.0.prior_prediction: needs regularisation = true"):
        train(_cfg(make_config, entries), [].append, device="cpu")
    reg = [{"path": str(subject)}, {"path": str(klass), "regularisation": True, "prior_prediction": True}]
    result = train(_cfg(make_config, reg, steps=2, output_name="prior"), [].append, device="cpu")
    sidecar = json.loads(result.lora_path.with_suffix(".json").read_text())
    assert sidecar["dataset"]["entries"][1]["prior_prediction"] is True


def test_a_huber_loss_with_entry_loss_weights_keeps_its_thresholds(make_config, subject_and_class) -> None:
    """Entry loss weights (a reg entry's prior_loss_weight among them) re-weight the drawn batch;
    the Huber thresholds stay with it (they were dropped: "the huber loss needs a threshold")."""
    subject, klass = subject_and_class
    reg = [{"path": str(subject)}, {"path": str(klass), "regularisation": True}]
    cfg = _cfg(make_config, reg, loss="huber", prior_loss_weight=2.0, steps=2, output_name="huber")
    assert train(cfg, [].append, device="cpu").steps_run == 2
