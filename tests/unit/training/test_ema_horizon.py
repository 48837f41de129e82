"""An EMA too slow for its run is named by the run's warnings (config_schedule.ema_horizon_warning,
RELIABILITY 1521): the EMA has no warmup, so its starting weights keep a share decay**updates of
the saved LoRA, and a fresh adapter starts as no change. ema_decay 0.9999, which the setting's
description calls typical, over the default 1000 steps saved a LoRA at a tenth of its strength,
said nowhere."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lorastudio.config import TrainConfig
from lorastudio.config_schedule import ema_horizon_warning
from lorastudio.data import scan_dataset
from lorastudio.data.entries import run_steps
from lorastudio.data.scan_warnings import scan_warnings
from lorastudio.training.ema import AdapterEma


def _cfg(folder: Path, **settings: object) -> TrainConfig:
    return TrainConfig.model_validate(
        {"family": "flux", "base_model": "/unused", "data_dir": str(folder), **settings}
    )


def test_the_saved_ema_keeps_decay_to_the_updates_of_the_start() -> None:
    """The premise: a lora_B that starts at 0 and trains to 1 by a straight line over 1000 steps is
    saved by an EMA of 0.999 (the start's share 0.999**1000 = 37 %) at 0.37: a third of it."""
    weight = torch.nn.Parameter(torch.zeros(4))
    ema = AdapterEma({"lora_B": weight}, 0.999)
    for step in range(1, 1001):
        with torch.no_grad():
            weight.fill_(step / 1000)
        ema.update(step)
    saved = float(ema.shadow["lora_B"][0])
    assert pytest.approx(0.368, abs=1e-3) == 0.999**1000
    assert saved == pytest.approx(0.3683, abs=1e-3)  # the trained weight is 1.0


def test_a_slow_ema_is_a_run_warning_with_the_decay_that_fits(small_dataset: Path) -> None:
    tmp_path = small_dataset
    scan = scan_dataset(small_dataset, resolution=64, multiple=16)
    (said,) = [
        w for w in scan_warnings(scan, _cfg(tmp_path, ema_decay=0.9999, steps=1000), None) if "ema" in w
    ]
    assert said.startswith(
        "ema_decay 0.9999 is slow for this run of 1000 optimizer steps: after its 1000 EMA"
    )
    assert "keeps 90% of the adapter's starting weights" in said and "ema_decay 0.997 or lower" in said
    assert 0.9970**1000 <= 0.05 < 0.9971**1000  # the decay named is the largest under the limit (4 places)
    for fine in ({"ema_decay": 0.99}, {}, {"ema_decay": 0.999, "steps": 5000}):
        assert not [w for w in scan_warnings(scan, _cfg(tmp_path, **fine), None) if "ema" in w], fine
    # an epoch run counts its steps over the scan; ema_update_every counts the updates
    epochs = _cfg(tmp_path, ema_decay=0.9, num_epochs=10, ema_update_every=2)
    steps, per_epoch = run_steps(epochs, scan)
    assert steps == 10 * per_epoch and per_epoch >= 1
    said = ema_horizon_warning(epochs, steps)
    assert f"run of {steps} optimizer steps: after its {steps // 2} EMA updates, one every 2 steps" in said
    assert [w for w in scan_warnings(scan, epochs, None) if "ema" in w] == [said]
    from_file = _cfg(tmp_path, ema_decay=0.999, steps=1000, init_lora="/unused/start.safetensors")
    assert "keeps 37% of init_lora's weights it started from, so it is that much that file's" in (
        ema_horizon_warning(from_file, 1000) or ""
    )


def test_an_ema_never_updated_names_ema_update_every_not_a_decay(tmp_path: Path) -> None:
    """ema_update_every over the run's steps: 0 updates, the saved LoRA is the start whatever the
    decay; the warning advised "ema_decay 0.05 or lower", which changes nothing."""
    cfg = _cfg(tmp_path, ema_decay=0.5, ema_update_every=100, steps=50)
    said = ema_horizon_warning(cfg, 50) or ""
    assert said.startswith(
        "ema_update_every 100 is more than this run's 50 optimizer steps: the EMA is never"
    )
    assert "set ema_update_every to at most 50" in said and "ema_decay 0" not in said
    assert (
        ema_horizon_warning(_cfg(tmp_path, ema_decay=0.01, ema_update_every=50, steps=50), 50) is None
    )  # 1 update
