"""A run's control_dirs folders (a paired run's controls in folders of their own, often datasets of
their own under datasets/: ai-toolkit's layout) are folders it reads: while the run is live, a
delete, a rename, an edit or a caption job of one is refused as for its dataset, and a CLI `train`
claims them too; one deleted after a start's checks refuses the start, naming control_dirs. Only
the dataset and the validation folder were claimed: the controls' dataset could be deleted under
a queued or running run, which then failed (RELIABILITY 1920)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jobs_fake_workers as fakes
import pytest
from caption_fake_workers import slow_fake_captioner

from lorastudio.captioning.options import CaptionOptions
from lorastudio.config import TrainConfig
from lorastudio.data.dataset_delete import delete_dataset
from lorastudio.data.dataset_names import rename_dataset
from lorastudio.errors import ConfigError, DatasetBusy, JobActive
from lorastudio.jobs import service as service_module
from lorastudio.jobs.captioning import CaptionJobs
from lorastudio.jobs.dataset_claims import WRITE, DatasetClaim, claim_cli_run
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.service import JobService
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings
from lorastudio.tiny.paired import make_paired_dataset


@pytest.fixture
def config(settings: Settings, tiny_model: Callable[[str], Path]) -> dict[str, Any]:
    """A FLUX.1 Kontext run on datasets/pairs whose controls are the dataset datasets/controls."""
    pairs = make_paired_dataset(settings.datasets_dir / "pairs")
    shutil.move(pairs / "control", settings.datasets_dir / "controls")
    return {
        "family": "flux-kontext", "base_model": str(tiny_model("flux-kontext")), "data_dir": "pairs",
        "control_dirs": ["controls"], "resolution": 32, "steps": 3, "max_sequence_length": 16,
        "output_name": "edit",
    }  # fmt: skip


@pytest.fixture
def service(settings: Settings) -> Iterator[JobService]:
    """A job service whose dispatcher is not started: a submitted run stays queued (live, its
    folders claimed) and no worker process is spawned."""
    service = JobService(
        settings, RunStore.open(settings.db_path), GpuArbiter(), worker_target=fakes.hang_ignoring_stop
    )
    yield service
    service.shutdown(timeout=5)


def test_a_live_runs_control_folder_is_not_deleted_renamed_edited_or_captioned(
    settings: Settings, config: dict[str, Any], service: JobService, tmp_path: Path
) -> None:
    controls = (settings.datasets_dir / "controls").resolve()
    vlm = tmp_path / "vlm"
    vlm.mkdir()
    (vlm / "config.json").write_text('{"model_type": "qwen2_5_vl"}', encoding="utf-8")
    captions = CaptionJobs(
        settings, GpuArbiter(), service.datasets_in_use, target=slow_fake_captioner, host_device=lambda: "cpu"
    )
    try:
        service.submit(config)
        assert controls in service.datasets_in_use()
        with pytest.raises(JobActive):
            delete_dataset(settings.datasets_dir, "controls", in_use=service.datasets_in_use)
        with pytest.raises(JobActive):
            rename_dataset(settings.datasets_dir, "controls", "moved", in_use=service.datasets_in_use)
        with pytest.raises(DatasetBusy):  # an upload, a caption edit, a delete through the API
            DatasetClaim.take(settings.home, settings.datasets_dir, [controls], WRITE, "an edit")
        with pytest.raises(JobActive, match="dataset 'controls' is used by a live training job"):
            captions.start("controls", CaptionOptions(model=str(vlm), overwrite=True))
        assert len(list(controls.glob("*.png"))) == 8
    finally:
        captions.shutdown()
    cfg = TrainConfig.model_validate(config)
    with claim_cli_run(cfg), pytest.raises(DatasetBusy):
        DatasetClaim.take(settings.home, settings.datasets_dir, [controls], WRITE, "an edit")


def test_a_control_folder_deleted_after_a_starts_checks_refuses_the_start(
    settings: Settings, config: dict[str, Any], service: JobService, monkeypatch: pytest.MonkeyPatch
) -> None:
    planned = service_module.planned_gpu_gib  # called between the start's checks and its queueing

    def delete_meanwhile(*args: Any, **kwargs: Any) -> Any:
        delete_dataset(settings.datasets_dir, "controls", in_use=service.datasets_in_use)
        return planned(*args, **kwargs)

    monkeypatch.setattr(service_module, "planned_gpu_gib", delete_meanwhile)
    with pytest.raises(ConfigError) as err:
        service.submit(config)
    folder = settings.datasets_dir.resolve() / "controls"
    assert [(p.field, p.message) for p in err.value.problems] == [
        ("control_dirs", f"dataset folder {folder} is gone: it was renamed or deleted after the run's checks")
    ]
    assert service.status()["busy"] is False and service.store.list_runs() == []
