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


def test_the_engine_lists_every_problem_at_once_without_decoding_the_dataset(
    make_config, small_dataset, tmp_path, monkeypatch
) -> None:
    """The engine's preflight refused in stages (RELIABILITY 811): a config problem of its own
    (fp16 on this CPU) ended it before the scan, so the rules that need the scan (an epoch run's
    save_every past its end) and the adapter targets were named only once it was fixed. Now one
    refusal names all three, as `train --check` and the API do, and no image is decoded in full."""
    import shutil

    import lorastudio.data.images as images

    def no_full_decode(*args, **kwargs):
        raise AssertionError("a refused run decoded its dataset")

    monkeypatch.setattr(images, "_full_decode", no_full_decode)
    data = tmp_path / "fresh"  # no decoded record lists its images
    shutil.copytree(small_dataset, data)
    cfg = make_config(data_dir=str(data), base_precision="fp16", num_epochs=1, save_every=1000,
                      lora_targets=["no_such_layer"], output_name="all")  # fmt: skip
    problems = _refused(cfg)
    assert set(problems) == {"base_precision", "save_every", "lora_targets"}, problems
    assert "no_such_layer" in problems["lora_targets"]


def test_a_dataset_problem_is_named_with_the_configs_other_problems(make_config, tmp_path) -> None:
    """A missing dataset folder (found by the engine's scan) beside bad lora_targets: both at once."""
    cfg = make_config(data_dir=str(tmp_path / "gone"), lora_targets=["no_such_layer"], output_name="gone")
    problems = _refused(cfg)
    assert set(problems) == {"data_dir", "lora_targets"}, problems
