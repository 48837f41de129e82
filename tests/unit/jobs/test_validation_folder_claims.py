"""A run's validation folder (validation_split = a folder, data/holdout.py) is one of the folders
it reads: while the run is live, a delete, an edit or a caption job of that folder is refused as
for its dataset, and a CLI `train` claims it too. It was read at the run's start (phase 2) like
the dataset, but only the dataset was protected: a delete of the folder of a queued run failed the
run when it started, a caption job rewrote captions the run was about to encode."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image
from wired_services import wired_services

from lorastudio.captioning.options import CaptionOptions
from lorastudio.config import TrainConfig
from lorastudio.data.dataset_delete import delete_dataset
from lorastudio.errors import DatasetBusy, JobActive
from lorastudio.jobs.dataset_claims import WRITE, DatasetClaim, claim_cli_run
from lorastudio.settings import Settings


def test_a_live_run_s_validation_folder_is_not_deleted_edited_or_captioned(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    held = Path(shutil.copytree(shapes, settings.datasets_dir / "held"))
    for path in held.glob("*.png"):  # other images than the training ones (a copy is refused)
        with Image.open(path) as img:
            other = img.convert("RGB")
        other.putpixel((0, 0), (1, 2, 3))
        other.save(path)
    vlm = tmp_path / "vlm"
    vlm.mkdir()
    (vlm / "config.json").write_text('{"model_type": "qwen2_5_vl"}', encoding="utf-8")
    service, captions = wired_services(settings)
    config = {
        "family": "flux", "base_model": str(tiny_model("flux")), "resolution": 32, "steps": 3,
        "data_dir": "shapes", "validation_split": "held", "output_name": "v",
    }  # fmt: skip
    try:
        service.submit(config)
        assert held.resolve() in service.datasets_in_use()
        with pytest.raises(JobActive):
            delete_dataset(settings.datasets_dir, "held", in_use=service.datasets_in_use)
        with pytest.raises(DatasetBusy):
            DatasetClaim.take(settings.home, settings.datasets_dir, [held], WRITE, "an edit")
        with pytest.raises(JobActive, match="dataset 'held' is used by a live training job"):
            captions.start("held", CaptionOptions(model=str(vlm), overwrite=True))
        assert held.is_dir()
    finally:
        service.shutdown(timeout=5)
        captions.shutdown()
    cfg = TrainConfig.model_validate({**config, "base_model": str(tiny_model("flux"))})
    with claim_cli_run(cfg), pytest.raises(DatasetBusy):
        DatasetClaim.take(settings.home, settings.datasets_dir, [held], WRITE, "an edit")
