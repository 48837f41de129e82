"""The optimizers of TrainConfig.optimizer (training/optimizers.py) on the tiny models: the default
is the fused AdamW of before; Prodigy learns its own step size and the loss falls; Adafactor
learns with a fixed LR and with its relative step; an option of another optimizer is refused;
8-bit optimizers are refused on the CPU before anything loads; a stopped run resumes bitwise
(optimizer state in the checkpoint), and the CLI's --set reaches the fields."""

from __future__ import annotations

import json

import pytest
import torch
from methods_cases import mini_config, mini_run
from safetensors.torch import load_file

from lorastudio.config import TrainConfig, parse_train_config
from lorastudio.config_host import optimizer_host_problems
from lorastudio.config_rules import OPTIMIZER_OPTIONS
from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings
from lorastudio.training.events import StopRequest
from lorastudio.training.loop import train
from lorastudio.training.optimizers import OPTIMIZERS, RelativeStepSchedule, build_optimizer


def test_the_registry_names_every_optimizer_of_the_schema():
    names = set(TrainConfig.model_fields["optimizer"].annotation.__args__)  # the Literal's values
    assert set(OPTIMIZERS) == names == set(OPTIMIZER_OPTIONS)


def test_the_default_is_the_fused_adamw_of_before():
    cfg = TrainConfig(family="flux", base_model="a/b", data_dir="d", learning_rate=3e-4)
    params = [torch.nn.Parameter(torch.zeros(3))]
    opt = build_optimizer(params, cfg)
    before = torch.optim.AdamW(params, lr=3e-4, weight_decay=cfg.weight_decay, fused=True)
    assert type(opt) is torch.optim.AdamW and opt.defaults == before.defaults
    tuned = build_optimizer(
        params, cfg.model_copy(update={"optimizer_betas": (0.8, 0.95), "optimizer_eps": 1e-6})
    )
    assert tuned.defaults["betas"] == (0.8, 0.95) and tuned.defaults["eps"] == 1e-6


def test_prodigy_learns_its_step_size_and_the_loss_falls(tiny_model):
    cfg = mini_config("flux", tiny_model("flux"), optimizer="prodigy", learning_rate=None)
    assert cfg.learning_rate == 1.0  # Prodigy's LR is a multiplier of the step size it learns
    run = mini_run(cfg, steps=10)
    assert all(b < a for a, b in zip(run.losses, run.losses[1:], strict=False)), run.losses
    group = run.optimizer.param_groups[0]
    assert group["d"] > 10 * group["d0"]  # the step size grew from d0
    faster = mini_run(cfg.model_copy(update={"prodigy_d_coef": 10.0}), steps=10)
    assert faster.losses[-1] < run.losses[-1] - 0.1  # d_coef multiplies it (measured 2.05 vs 2.57)


def test_a_prodigy_run_logs_its_step_size_as_it_grows(make_config):
    """Progress.lr (the trackers' train/lr, the run record's LR chart) is the step Prodigy takes,
    d * lr, not its learning_rate (a constant multiplier of d)."""
    events: list = []
    cfg = make_config(steps=6, optimizer="prodigy", learning_rate=1.0, lr_scheduler="constant")
    result = train(cfg, events.append, device="cpu", return_denoiser=True)
    lrs = [e.lr for e in events if e.type == "progress"]
    assert len(lrs) == 6 and lrs[0] == pytest.approx(1e-6)  # prodigyopt's d0 x learning_rate 1.0
    assert all(b >= a for a, b in zip(lrs, lrs[1:], strict=False)) and lrs[-1] > 1.5 * lrs[0], (
        lrs
    )  # d grew (1.8x here)
    assert max(lrs) < 1.0 and result.steps_run == 6


@pytest.mark.parametrize("family", ["flux", "sdxl"])
def test_adafactor_loss_falls(family, tiny_model):
    run = mini_run(mini_config(family, tiny_model(family), optimizer="adafactor"), steps=5)
    assert all(b < a for a, b in zip(run.losses, run.losses[1:], strict=False)), run.losses
    assert type(run.optimizer).__name__ == "Adafactor" and not run.optimizer.defaults["relative_step"]


def test_adafactor_relative_step_sizes_its_own_steps(tiny_model):
    cfg = mini_config(
        "flux", tiny_model("flux"), optimizer="adafactor", adafactor_relative_step=True, learning_rate=None
    )
    assert cfg.learning_rate is None  # Adafactor's own step size replaces it
    run = mini_run(cfg, steps=4)
    assert all(b < a for a, b in zip(run.losses, run.losses[1:], strict=False)), run.losses
    schedule = RelativeStepSchedule(run.optimizer)
    assert schedule.get_last_lr() == [pytest.approx(min(1e-2, 1 / 5**0.5))]  # the 5th step's size


def _settings(**overrides):
    return {"family": "flux", "base_model": "a/b", "data_dir": "d", **overrides}


def test_options_of_another_optimizer_are_refused_with_the_reason():
    with pytest.raises(ConfigError) as err:
        parse_train_config(
            _settings(prodigy_d_coef=2.0, adafactor_relative_step=True, optimizer_eps=1e-6)
        )  # default adamw: eps is its own
    problems = {p.field: p.message for p in err.value.problems}
    assert set(problems) == {"prodigy_d_coef", "adafactor_relative_step"}
    assert "not an option of optimizer 'adamw'" in problems["prodigy_d_coef"]
    with pytest.raises(ConfigError) as err:
        parse_train_config(_settings(optimizer="lion8bit", optimizer_eps=1e-6))
    assert [p.field for p in err.value.problems] == ["optimizer_eps"]
    with pytest.raises(ConfigError) as err:
        parse_train_config(_settings(optimizer="adafactor", optimizer_betas=[0.9, 0.99]))
    assert [p.field for p in err.value.problems] == ["optimizer_betas"]
    parse_train_config(_settings(optimizer="prodigy", prodigy_d_coef=2.0, prodigy_safeguard_warmup=True))


def test_a_prodigy_learning_rate_that_stalls_its_step_size_is_refused(tiny_model):
    """Prodigy's d estimate scales with its learning_rate: at an Adam-sized LR d never leaves d0
    and the adapter barely moves (measured here: the loss of 5 steps moves < 1e-5, where at 1.0
    d grows 10x and the loss falls: test_prodigy_learns_its_step_size_and_the_loss_falls), so a
    learning_rate below 0.1 is refused naming why; unset (1.0) and 0.1 are accepted."""
    cfg = mini_config("flux", tiny_model("flux"), optimizer="prodigy", learning_rate=None)
    stalled = mini_run(cfg.model_copy(update={"learning_rate": 5e-3}), steps=5)
    assert stalled.optimizer.param_groups[0]["d"] == 1e-6  # prodigyopt's d0: it never grew
    assert abs(stalled.losses[-1] - stalled.losses[0]) < 1e-5, stalled.losses
    for lr in (5e-3, 1e-4, 0.099):
        with pytest.raises(ConfigError) as err:
            parse_train_config(_settings(optimizer="prodigy", learning_rate=lr))
        assert [p.field for p in err.value.problems] == ["learning_rate"]
        assert "d stays at its start" in err.value.problems[0].message
    parse_train_config(_settings(optimizer="prodigy", learning_rate=0.1))
    assert parse_train_config(_settings(optimizer="prodigy")).learning_rate is None  # resolved to 1.0


def test_adafactor_relative_step_refuses_what_it_replaces():
    with pytest.raises(ConfigError) as err:
        parse_train_config(
            _settings(
                optimizer="adafactor", adafactor_relative_step=True, learning_rate=1e-4, lr_scheduler="cosine"
            )
        )
    assert {p.field for p in err.value.problems} == {"learning_rate", "lr_scheduler"}
    with pytest.raises(ConfigError, match="adafactor_warmup_init"):
        parse_train_config(_settings(optimizer="adafactor", adafactor_warmup_init=True))
    with pytest.raises(ConfigError, match="optimizer_betas"):
        parse_train_config(_settings(optimizer_betas=[0.9, 1.0]))


@pytest.mark.parametrize("name", ["adamw8bit", "lion8bit"])
def test_8bit_optimizers_are_refused_on_the_cpu_before_any_load(name, make_config):
    events: list = []
    with pytest.raises(ConfigError) as err:
        train(make_config(optimizer=name), events.append, device="cpu")
    assert [p.field for p in err.value.problems] == ["optimizer"]
    assert "8-bit CUDA kernels" in str(err.value) and "training device is cpu" in str(err.value)
    assert not any(e.type == "model_load_started" for e in events)
    assert not (get_settings().outputs_dir / "run").exists()
    assert optimizer_host_problems("prodigy", "cpu") == optimizer_host_problems("adamw", "cpu") == []


def test_8bit_without_bitsandbytes_is_refused_naming_the_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "bitsandbytes" else real(n, *a)
    )
    (problem,) = optimizer_host_problems("adamw8bit", "cuda")
    assert "lorastudio[bnb]" in problem.message


def _stop_at(step: int):
    events: list = []

    def check() -> StopRequest | None:
        done = [e for e in events if e.type == "progress"]
        return StopRequest(save=True) if done and done[-1].step >= step else None

    return events, check


@pytest.mark.parametrize(
    "settings",
    [
        {"optimizer": "prodigy", "prodigy_use_bias_correction": True, "learning_rate": 1.0},
        {"optimizer": "adafactor", "learning_rate": 1e-2},
        {"optimizer": "adafactor", "adafactor_relative_step": True, "learning_rate": None},
    ],
    ids=["prodigy", "adafactor", "adafactor-relative"],
)
def test_stop_and_resume_is_bitwise_with_the_optimizer_state(settings, make_config):
    settings = {"steps": 4, "caption_dropout": 0.3, "lr_scheduler": "constant", **settings}
    full = train(make_config(output_name="full", **settings), [].append, device="cpu")
    events, stop = _stop_at(2)
    first = train(make_config(output_name="part", **settings), events.append, stop, device="cpu")
    assert first.stopped and first.losses == full.losses[:2]
    run_dir = get_settings().outputs_dir / "part"
    resumed = train(make_config(output_name="part", **settings), [].append, device="cpu", resume=run_dir)
    assert resumed.losses == full.losses and len(set(full.losses)) == 4
    a, b = load_file(str(full.lora_path)), load_file(str(resumed.lora_path))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(v.abs().sum() > 0 for k, v in a.items() if "lora_B" in k or "lora_up" in k)  # it trained
    sidecar = json.loads(resumed.lora_path.with_suffix(".json").read_text())
    assert sidecar["config"]["optimizer"] == settings["optimizer"]


def test_cli_set_reaches_the_optimizer_fields(make_config, tmp_path):
    from typer.testing import CliRunner

    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    config = tmp_path / "run.json"
    config.write_text(make_config().model_dump_json(exclude_unset=True))
    result = CliRunner().invoke(
        app,
        [
            "train",
            str(config),
            "--set",
            "optimizer=adamw8bit",
            "--set",
            "prodigy_d_coef=2",
            "--device",
            "cpu",
        ],
    )
    assert result.exit_code == 2, result.output
    assert "prodigy_d_coef" in result.output and "not an option of optimizer 'adamw8bit'" in result.output


def test_the_job_service_refuses_8bit_on_this_host_before_queueing():
    from lorastudio.jobs.host_rules import host_problems

    cfg = TrainConfig(family="flux", base_model="a/b", data_dir="d", optimizer="lion8bit")
    problems = host_problems(cfg, get_settings())  # this CPU-only test host
    assert [p.field for p in problems] == ["optimizer"] and "8-bit CUDA kernels" in problems[0].message
    assert host_problems(cfg.model_copy(update={"optimizer": "prodigy"}), get_settings()) == []
