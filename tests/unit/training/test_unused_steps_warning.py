"""A `steps` an epoch run does not use is named by the run's warnings (session 38 journey): with
num_epochs > 0 the run's length is counted in epochs and `steps = 1500` (a TOML's, a kohya
config's max_train_steps beside its epochs, `--set steps=N`) was dropped without a word."""

from __future__ import annotations

from pathlib import Path

from lorastudio.config import TrainConfig, resolve_train_config
from lorastudio.data import scan_dataset
from lorastudio.data.entries import run_steps
from lorastudio.data.scan_warnings import scan_warnings


def _cfg(folder: Path, **settings: object) -> TrainConfig:
    data = {"family": "flux", "base_model": "/unused", "data_dir": str(folder), "resolution": 64, **settings}
    return resolve_train_config(TrainConfig.model_validate(data))  # as a run sees it: every field set


def test_a_steps_an_epoch_run_does_not_use_is_a_warning(small_dataset: Path) -> None:
    scan = scan_dataset(small_dataset, resolution=64, multiple=16)
    epochs = _cfg(small_dataset, steps=1500, num_epochs=2)
    total = run_steps(epochs, scan)[0]
    said = [w for w in scan_warnings(scan, epochs, None) if "steps = " in w]
    assert said == [
        f"steps = 1500 is not used: num_epochs = 2 sets the run's length ({total} optimizer steps); "
        "remove num_epochs (or set it to 0) to train 1500 steps"
    ]
    # the default steps beside epochs (the web form's epoch runs send none), or a steps run: nothing
    for fine in ({"num_epochs": 2}, {"steps": 1500}, {"steps": 1000, "num_epochs": 3}):
        assert not [w for w in scan_warnings(scan, _cfg(small_dataset, **fine), None) if "steps = " in w], (
            fine
        )
    # a family whose default steps is another (Chroma: 2000) is judged against its own
    chroma = _cfg(small_dataset, family="chroma", num_epochs=2)
    assert chroma.steps == 2000 and not [w for w in scan_warnings(scan, chroma, None) if "steps = " in w]
