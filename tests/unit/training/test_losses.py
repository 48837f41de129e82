"""TrainConfig.loss / huber_c / huber_schedule (training/losses.py): each loss is its formula on a
known residual (huber ~ MSE for small residuals, ~ L1 for large ones); the schedules move the
threshold with the noise level of DDPM and flow samples; on the tiny models a run's loss is the
hand-computed formula of the prediction (min-SNR composing for SDXL); options without a Huber
loss are refused; a stopped Huber run resumes bitwise."""

from __future__ import annotations

import json
import math

import pytest
import torch
from methods_cases import NOISE_SEED, mini_batch, mini_config, mini_run
from safetensors.torch import load_file

from lorastudio import families
from lorastudio.config import TrainConfig, parse_train_config, resolve_train_config
from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings
from lorastudio.training.events import StopRequest
from lorastudio.training.loop import train
from lorastudio.training.losses import LossSettings, huber_thresholds, per_sample_loss


def _loss_of(kind: str, r: float, c: float | None = None) -> float:
    pred, target = torch.full((1, 2, 2, 2), r), torch.zeros(1, 2, 2, 2)
    thresholds = None if c is None else torch.tensor([c])
    return float(per_sample_loss(kind, pred, target, thresholds)[0])


def test_each_loss_is_its_formula_on_a_known_residual():
    assert _loss_of("mse", 3.0) == pytest.approx(9.0)
    assert _loss_of("l1", -3.0) == pytest.approx(3.0)
    assert _loss_of("huber", 3.0, 0.1) == pytest.approx(2 * 0.1 * (math.sqrt(9.01) - 0.1))
    assert _loss_of("smooth_l1", 3.0, 0.1) == pytest.approx(2 * (math.sqrt(9.01) - 0.1))
    # huber ~ MSE below c, ~ L1 (times 2c) far above it
    assert _loss_of("huber", 1e-3, 0.1) == pytest.approx(_loss_of("mse", 1e-3), rel=1e-4)
    assert _loss_of("huber", 1e3, 0.1) == pytest.approx(2 * 0.1 * _loss_of("l1", 1e3), rel=1e-3)
    assert _loss_of("smooth_l1", 1e3, 0.1) == pytest.approx(2 * _loss_of("l1", 1e3), rel=1e-3)
    with pytest.raises(ValueError, match="threshold"):
        _loss_of("huber", 1.0)


def test_the_threshold_schedules():
    time, nsr = torch.tensor([0.0, 0.5, 1.0]), torch.tensor([0.0, 1.0, 1e6])
    const = huber_thresholds(LossSettings("huber", 0.2, "constant"), time, nsr)
    assert const.tolist() == pytest.approx([0.2, 0.2, 0.2])
    exp = huber_thresholds(LossSettings("huber", 0.2, "exponential"), time, nsr)
    assert exp.tolist() == pytest.approx([1.0, 0.2**0.5, 0.2])  # 1 on clean latents -> c at pure noise
    snr = huber_thresholds(LossSettings("huber", 0.2, "snr"), time, nsr)
    assert snr.tolist() == pytest.approx([1.0, 0.8 / 4 + 0.2, 0.2], abs=1e-6)


def _first_loss_by_hand(cfg: TrainConfig) -> float:
    """The loss of a mini run's first step, from the formula written out here: the same batch,
    noise and initial adapter as methods_cases.mini_run."""
    mb = mini_batch(cfg)
    noised = mb.objective.noise(mb.latents, torch.Generator().manual_seed(NOISE_SEED))
    with torch.no_grad():
        pred = mb.family.predict(mb.denoiser, noised.noisy, noised.noise_level, mb.cond, mb.info, cfg)
    r = pred.float() - noised.target  # [2, C, h, w]
    c = cfg.huber_c
    if cfg.huber_schedule == "snr":  # the noise-to-signal ratio of each sample's input
        if cfg.family == "sdxl":
            a = mb.objective.alphas_cumprod[noised.noise_level]
            k = ((1 - a) / a).sqrt()
        else:
            k = noised.noise_level / (1 - noised.noise_level)
        c = ((1 - cfg.huber_c) / (1 + k) ** 2 + cfg.huber_c).view(-1, 1, 1, 1)
    elif cfg.huber_schedule == "exponential":
        c = (cfg.huber_c ** noised.noise_level.float()).view(-1, 1, 1, 1)  # flow: time = sigma
    elementwise = {
        "mse": lambda: r**2,
        "l1": lambda: r.abs(),
        "huber": lambda: 2 * c * (torch.sqrt(r**2 + c**2) - c),
        "smooth_l1": lambda: 2 * (torch.sqrt(r**2 + c**2) - c),
    }[cfg.loss]()
    per_sample = elementwise.mean(dim=(1, 2, 3)) * noised.weight  # min-SNR weights (SDXL)
    return float(per_sample.mean())


@pytest.mark.parametrize(
    ("family", "settings"),
    [
        ("flux", {"loss": "mse"}),
        ("flux", {"loss": "l1"}),
        ("flux", {"loss": "huber", "huber_c": 0.3, "huber_schedule": "exponential"}),
        ("flux", {"loss": "smooth_l1", "huber_schedule": "snr"}),
        ("sdxl", {"loss": "huber", "huber_schedule": "snr", "snr_gamma": 5.0}),
        ("sdxl", {"loss": "l1", "snr_gamma": 1.0}),
    ],
    ids=[
        "flux-mse",
        "flux-l1",
        "flux-huber-exp",
        "flux-smoothl1-snr",
        "sdxl-huber-snr-minsnr",
        "sdxl-l1-minsnr",
    ],
)
def test_a_run_trains_on_the_formula_of_its_loss(family, settings, tiny_model):
    cfg = mini_config(family, tiny_model(family), **settings)
    run = mini_run(cfg, steps=3)
    assert run.losses[0] == pytest.approx(_first_loss_by_hand(cfg), rel=1e-5)
    assert run.losses[-1] < run.losses[0]  # it learns under every loss
    if settings["loss"] != "mse":
        mse = mini_run(mini_config(family, tiny_model(family), snr_gamma=settings.get("snr_gamma")), steps=3)
        assert mse.losses[0] != pytest.approx(run.losses[0])


OTHER_OBJECTIVES = [  # every other family's prediction target (edit families need reference images)
    n for n in families.names() if n not in ("flux", "sdxl") and not families.get(n).spec.edit_model
]


@pytest.mark.parametrize("family", OTHER_OBJECTIVES)
def test_every_family_trains_on_the_scheduled_smooth_l1_formula(family, tiny_model):
    cfg = mini_config(family, tiny_model(family), loss="smooth_l1", huber_schedule="snr", huber_c=0.2)
    run = mini_run(cfg, steps=2)
    assert run.losses[0] == pytest.approx(_first_loss_by_hand(cfg), rel=1e-5)
    assert run.losses[1] < run.losses[0]


def test_resolving_fills_the_huber_defaults_and_leaves_other_losses_alone():
    base = {"family": "flux", "base_model": "a/b", "data_dir": "d", "learning_rate": 1e-4}
    huber = resolve_train_config(parse_train_config({**base, "loss": "huber"}))
    assert (huber.huber_c, huber.huber_schedule) == (0.1, "constant")
    plain = resolve_train_config(parse_train_config(base))
    assert (plain.loss, plain.huber_c, plain.huber_schedule) == ("mse", None, None)


def test_huber_options_without_a_huber_loss_are_refused():
    base = {"family": "flux", "base_model": "a/b", "data_dir": "d"}
    with pytest.raises(ConfigError) as err:
        parse_train_config({**base, "loss": "l1", "huber_c": 0.2, "huber_schedule": "snr"})
    problems = {p.field: p.message for p in err.value.problems}
    assert set(problems) == {"huber_c", "huber_schedule"} and "'l1'" in problems["huber_c"]
    with pytest.raises(ConfigError) as err:
        parse_train_config({**base, "loss": "huber", "huber_c": 2.0, "huber_schedule": "snr"})
    assert [p.field for p in err.value.problems] == ["huber_c"]
    parse_train_config({**base, "loss": "smooth_l1", "huber_c": 2.0})  # constant: any c
    with pytest.raises(ConfigError, match="loss"):
        parse_train_config({**base, "loss": "l2"})


def test_stop_and_resume_is_bitwise_with_a_scheduled_huber_loss(make_config):
    settings = {"steps": 4, "loss": "huber", "huber_schedule": "snr", "huber_c": 0.05, "family": "sdxl"}
    full = train(make_config(output_name="full", **settings), [].append, device="cpu")
    events: list = []

    def stop() -> StopRequest | None:
        done = [e for e in events if e.type == "progress"]
        return StopRequest(save=True) if done and done[-1].step >= 2 else None

    first = train(make_config(output_name="part", **settings), events.append, stop, device="cpu")
    assert first.stopped and first.losses == full.losses[:2]
    run_dir = get_settings().outputs_dir / "part"
    other = {**settings, "loss": "l1", "huber_c": None, "huber_schedule": None}
    with pytest.raises(ConfigError, match="loss"):  # the loss is part of the run's identity
        train(make_config(output_name="part", **other), [].append, device="cpu", resume=run_dir)
    resumed = train(make_config(output_name="part", **settings), [].append, device="cpu", resume=run_dir)
    assert resumed.losses == full.losses and len(set(full.losses)) == 4
    a, b = load_file(str(full.lora_path)), load_file(str(resumed.lora_path))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    sidecar = json.loads(resumed.lora_path.with_suffix(".json").read_text())
    assert {k: sidecar["config"][k] for k in ("loss", "huber_c", "huber_schedule")} == {
        "loss": "huber",
        "huber_c": 0.05,
        "huber_schedule": "snr",
    }


def test_a_checkpoint_older_than_these_settings_resumes_when_they_keep_their_defaults():
    from lorastudio.training.resume.identity import identity_problems, run_identity

    base = {"family": "sdxl", "base_model": "a/b", "data_dir": "d", "learning_rate": 1e-4}
    current = run_identity(resolve_train_config(parse_train_config(base)), "fp", ("to_q",))
    newer = ("loss", "huber_c", "huber_schedule", "train_text_encoder", "text_encoder_lr")
    older = {k: v for k, v in current.items() if k not in newer}  # written before these fields existed
    assert identity_problems(older, current) == []
    huber = run_identity(resolve_train_config(parse_train_config({**base, "loss": "huber"})), "fp", ("to_q",))
    assert {p.field for p in identity_problems(older, huber)} == {"loss", "huber_c", "huber_schedule"}
    assert [p.field for p in identity_problems({**older, "gone": 1}, current)] == ["gone"]
