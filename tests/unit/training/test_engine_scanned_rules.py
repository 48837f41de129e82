"""The config rules that need the scanned dataset, asked by the engine's own preflight as by the job
service's check (RELIABILITY 683): an epoch run's periodic settings and warmup against its length
in steps, and a weighted entry whose share of the epoch rounds to 0 samples, were refused by
`train --check` and the API (jobs/validation.py) but accepted by the engine (training/preflight.py,
what `train()` runs: a CLI `--resume` with `--set`, any caller of the engine), which then trained a
run whose save_every fell on no step, whose LR never left its warmup, or whose entry never trained.
Found by the session 28 fuzz audit (tests/config_fuzz.py): the CLI and the API refused a generated
document that the engine accepted."""

from __future__ import annotations

import pytest

from lorastudio.errors import ConfigError
from lorastudio.training.loop import train


def _refused(cfg) -> dict[str, str]:
    events: list = []
    with pytest.raises(ConfigError) as err:
        train(cfg, events.append, device="cpu")
    assert not any(e.type in ("loading", "loaded", "step") for e in events)  # before any load
    return {p.field: p.message for p in err.value.problems}


def test_an_epoch_runs_periodic_settings_are_checked_against_its_length(make_config) -> None:
    # 4 images, batch 2, one bucket each of two sizes: 3 steps an epoch
    cfg = make_config(
        num_epochs=1,
        save_every=1000,
        lr_warmup_steps=50,
        lr_scheduler="constant_with_warmup",
        output_name="e",
    )
    problems = _refused(cfg)
    assert set(problems) == {"save_every", "lr_warmup_steps"}, problems
    assert problems["save_every"].startswith("1000 exceeds the run's")


def test_a_weighted_entry_with_no_sample_of_the_epoch_is_refused(
    make_config, small_dataset, sample_dataset
) -> None:
    entries = [{"path": str(small_dataset), "weight": 1.0}, {"path": str(sample_dataset), "weight": 1e6}]
    cfg = make_config(datasets=entries, data_dir=None, output_name="w")
    problems = _refused(cfg)
    assert (
        list(problems) == ["datasets.0.weight"]
        and "gives it 0 of the epoch's" in problems["datasets.0.weight"]
    )
