"""DoRA's magnitudes and weight decay (RELIABILITY 630, training/resume/identity_rules.py): a new DoRA run
keeps its magnitude vectors (the base's row norms at the start) out of the optimizer's decoupled
weight decay, in a param group of their own with weight_decay 0 that the LR schedule scales like
the others; a DoRA checkpoint of the older rule (one group, magnitudes decayed) resumes bitwise
under that rule and keeps it; a new DoRA run resumes bitwise; a LoRA run's optimizer is as before.

The older rule is this code with the identity's record left out (the code before the rule wrote
none); the upgrade audit (tests/upgrade/, slow) resumes a DoRA checkpoint the older code itself
wrote."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lorastudio.config import TrainConfig
from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings
from lorastudio.training.loop import TrainResult, train
from lorastudio.training.optim import make_optimizer
from lorastudio.training.resume import identity as identity_module
from lorastudio.training.resume.checkpoint import list_checkpoints, read_checkpoint_info
from lorastudio.training.resume.identity import identity_problems, run_identity
from lorastudio.training.resume.identity_rules import DORA_DECAY_RULE
from stop_at import stop_at

LR, DECAY, STEPS = 1e-2, 1.0, 4  # decoupled decay: x (1 - lr x DECAY) a step


@contextmanager
def older_rule(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Runs inside record no DoRA weight-decay rule, as the code before it (rule 1)."""
    real = identity_module.rules_record
    with monkeypatch.context() as patch:
        patch.setattr(
            identity_module,
            "rules_record",
            lambda cfg: {k: v for k, v in real(cfg).items() if k != DORA_DECAY_RULE},
        )
        yield


def _magnitudes(denoiser: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in denoiser.named_parameters() if "lora_magnitude_vector" in n}


def _state(run: str) -> dict:
    *_, checkpoint = list_checkpoints(get_settings().outputs_dir / run)  # the newest
    return torch.load(checkpoint / "state.pt", map_location="cpu", weights_only=True)


def _same_lora(a: TrainResult, b: TrainResult) -> None:
    assert a.lora_path is not None and b.lora_path is not None
    x, y = load_file(str(a.lora_path)), load_file(str(b.lora_path))
    assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
    assert any("lora_magnitude_vector" in k for k in x)  # the diffusers layout of before


def _dora(make_config: Callable[..., TrainConfig], name: str, **over: object) -> TrainConfig:
    settings = {"adapter": "dora", "steps": STEPS, "learning_rate": LR, "weight_decay": DECAY}
    return make_config(output_name=name, **{**settings, "lr_scheduler": "cosine", **over})


def test_weight_decay_no_longer_shrinks_doras_magnitudes(make_config, monkeypatch) -> None:
    """weight_decay 1 against 0, everything else equal: the magnitudes end the same (the decay
    reaches them only through the other weights' change), where the older rule shrank them by
    (1 - lr x weight_decay) a step (the cosine schedule's LRs here: x 0.975 over the 4 steps)."""

    def ratios(prefix: str) -> tuple[torch.Tensor, int]:
        runs = [
            train(
                _dora(make_config, f"{prefix}{wd}", weight_decay=wd, save_every=1),
                [].append,
                device="cpu",
                return_denoiser=True,
            )
            for wd in (DECAY, 0.0)
        ]
        decayed, free = (_magnitudes(r.denoiser) for r in runs)
        assert decayed.keys() == free.keys() and decayed
        return torch.cat([decayed[n] / free[n] for n in decayed]), len(decayed)

    now, count = ratios("wd")
    assert float((now - 1).abs().max()) < 1e-3, now  # measured: 1e-6
    groups = _state("wd1.0")["optimizer"]["param_groups"]
    assert [g["weight_decay"] for g in groups] == [DECAY, 0.0] and len(groups[1]["params"]) == count
    assert groups[0]["lr"] == groups[1]["lr"] < LR  # the cosine schedule scales both alike
    *_, checkpoint = list_checkpoints(get_settings().outputs_dir / "wd1.0")
    assert read_checkpoint_info(checkpoint)["identity"][DORA_DECAY_RULE] == 2
    with older_rule(monkeypatch):
        before, _ = ratios("old")  # the test sees the shrink where there is one
    assert float(before.max()) < 0.98 and float(before.min()) > 0.97, before  # measured: 0.9745-0.9760


def test_an_older_dora_checkpoint_resumes_bitwise_under_its_rule(make_config, monkeypatch) -> None:
    """A DoRA checkpoint without the record (one param group, magnitudes decayed) resumes with
    this code bitwise onto the older rule's uninterrupted run, never refused nor moved to the new
    rule, and its later checkpoints keep the older rule (a second resume would too)."""
    settings = {"save_every": 1}
    with older_rule(monkeypatch):
        full = train(_dora(make_config, "full", **settings), [].append, device="cpu")
        events, stop = stop_at(2)
        part = train(_dora(make_config, "part", **settings), events.append, stop, device="cpu")
    assert part.stopped and part.losses == full.losses[:2]
    assert len(_state("part")["optimizer"]["param_groups"]) == 1
    run_dir = get_settings().outputs_dir / "part"
    resumed = train(_dora(make_config, "part", **settings), [].append, device="cpu", resume=run_dir)
    assert resumed.losses == full.losses and len(set(full.losses)) == STEPS
    _same_lora(full, resumed)
    newest = list_checkpoints(run_dir)[-1]
    assert read_checkpoint_info(newest)["step"] == STEPS - 1  # written by the resumed session
    assert DORA_DECAY_RULE not in read_checkpoint_info(newest)["identity"]
    assert len(_state("part")["optimizer"]["param_groups"]) == 1


@pytest.mark.parametrize(
    "over",
    [{}, {"optimizer": "prodigy", "learning_rate": 1.0, "lr_scheduler": "constant"}],
    ids=["adamw", "prodigy"],
)
def test_a_new_dora_run_resumes_bitwise(make_config, over) -> None:
    full = train(_dora(make_config, "full", **over), [].append, device="cpu")
    events, stop = stop_at(2)
    part = train(_dora(make_config, "part", **over), events.append, stop, device="cpu")
    assert part.stopped and part.losses == full.losses[:2]
    groups = _state("part")["optimizer"]["param_groups"]
    assert [g["weight_decay"] for g in groups] == [DECAY, 0.0]
    if "optimizer" in over:  # Prodigy's one step size d, learned over every group
        assert groups[0]["d"] == groups[1]["d"] and groups[0]["k"] == groups[1]["k"] == 2
    run_dir = get_settings().outputs_dir / "part"
    resumed = train(_dora(make_config, "part", **over), [].append, device="cpu", resume=run_dir)
    assert resumed.losses == full.losses and len(set(full.losses)) == STEPS
    _same_lora(full, resumed)


def test_a_lora_runs_optimizer_is_as_before(make_config) -> None:
    """LoRA: no record, one param group of every adapter parameter at the run's weight decay, and
    the same groups as the optimizer of before (make_optimizer without magnitudes)."""
    result = train(
        make_config(output_name="lora", weight_decay=0.5, save_every=1),
        [].append,
        device="cpu",
        return_denoiser=True,
    )
    run_dir = get_settings().outputs_dir / "lora"
    assert DORA_DECAY_RULE not in read_checkpoint_info(list_checkpoints(run_dir)[-1])["identity"]
    (group,) = _state("lora")["optimizer"]["param_groups"]
    params = [p for p in result.denoiser.parameters() if p.requires_grad]
    assert group["params"] == list(range(len(params))) and group["weight_decay"] == 0.5
    before = torch.optim.AdamW(params, lr=5e-3, weight_decay=0.5, fused=True)
    assert make_optimizer(params, make_config(weight_decay=0.5)).state_dict() == before.state_dict()


def test_the_groups_with_text_encoders_and_magnitudes() -> None:
    """The denoiser's group first, the text encoders' second (at text_encoder_lr), then the
    magnitudes at weight_decay 0 (the text encoders' at their LR)."""
    cfg = TrainConfig(
        family="sdxl",
        base_model="a/b",
        data_dir="d",
        learning_rate=1e-4,
        weight_decay=0.1,
        text_encoder_lr=1e-5,
    )
    a, m, t, tm = (torch.nn.Parameter(torch.zeros(2)) for _ in range(4))
    opt = make_optimizer([a, m], cfg, [t, tm], magnitudes=[m, tm])
    got = [([id(p) for p in g["params"]], g["lr"], g["weight_decay"]) for g in opt.param_groups]
    lr = cfg.learning_rate
    assert got == [([id(a)], lr, 0.1), ([id(t)], 1e-5, 0.1), ([id(m)], lr, 0.0), ([id(tm)], 1e-5, 0.0)]
    plain = make_optimizer([a, m], cfg, [t, tm])  # no magnitudes: the two groups of before
    assert [len(g["params"]) for g in plain.param_groups] == [2, 2]


def test_the_job_services_check_takes_either_rule_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    cfg = TrainConfig(family="flux", base_model=str(tmp_path), data_dir="d", adapter="dora")
    now = run_identity(cfg, "fp", ("to_q",))
    assert now[DORA_DECAY_RULE] == 2
    older = {k: v for k, v in now.items() if k != DORA_DECAY_RULE}
    assert identity_problems(older, now) == [] and identity_problems(now, now) == []
    (problem,) = identity_problems({**now, DORA_DECAY_RULE: 3}, now)
    assert problem.field == DORA_DECAY_RULE and "rule 3" in problem.message
    lora = run_identity(cfg.model_copy(update={"adapter": "lora"}), "fp", ("to_q",))
    assert DORA_DECAY_RULE not in lora  # other adapters: the identity of before


def test_a_checkpoint_whose_groups_do_not_fit_is_refused_naming_them(make_config) -> None:
    """A new-rule checkpoint whose record was taken out of identity.json by hand resumes as rule 1
    (one group): its optimizer state (two groups) is refused with the reason, not torch's bare
    ValueError."""
    import json

    events, stop = stop_at(1)
    train(_dora(make_config, "cut", steps=3), events.append, stop, device="cpu")
    (checkpoint,) = list_checkpoints(get_settings().outputs_dir / "cut")
    info = json.loads((checkpoint / "identity.json").read_text())
    del info["identity"][DORA_DECAY_RULE]
    (checkpoint / "identity.json").write_text(json.dumps(info))
    with pytest.raises(ConfigError) as err:
        train(_dora(make_config, "cut", steps=3), [].append, device="cpu", resume=checkpoint)
    assert [p.field for p in err.value.problems] == ["resume"]
    assert "param groups of [" in str(err.value) and "does not fit" in str(err.value)
