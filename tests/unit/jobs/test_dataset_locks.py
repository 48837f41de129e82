"""A run and a caption job never share a dataset (jobs/dataset_locks.py): a run on a dataset a
CPU caption job writes is refused naming the dataset and the job, and a caption job on a dataset
a run reads is refused; both services wired as the API wires them, real spawned workers."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from wired_services import wired_services

from lorastudio.captioning.options import CaptionOptions
from lorastudio.errors import JobActive, NotFound
from lorastudio.jobs.dataset_locks import overlaps
from lorastudio.settings import Settings


def _cfg(model: Path, data: dict) -> dict:
    return {"family": "flux", "base_model": str(model), "resolution": 32, "steps": 3, **data}


@pytest.fixture
def vlm(tmp_path: Path) -> str:
    folder = tmp_path / "vlm"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen2_5_vl"}', encoding="utf-8")
    return str(folder)


def test_a_run_on_a_dataset_being_captioned_is_refused(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path], vlm: str
) -> None:
    model = tiny_model("flux")
    service, captions = wired_services(settings)
    try:
        job = captions.start("shapes", CaptionOptions(model=vlm, overwrite=True))  # 8 images, 0.4 s each
        for data in ({"data_dir": "shapes"}, {"datasets": [{"path": "shapes", "repeats": 2}]}):
            with pytest.raises(JobActive) as refused:
                service.submit(_cfg(model, {**data, "output_name": "r1"}))
            assert (
                f"dataset 'shapes' ({shapes.resolve()}) is being captioned by caption job {job['id']}"
                in str(refused.value)
            )
        assert service.store.list_runs() == []  # nothing recorded
        assert service.status()["queue"] == []
        captions.cancel(job["id"])
        assert captions.wait(job["id"], 60)["status"] == "cancelled"
        started = service.submit(_cfg(model, {"data_dir": "shapes", "output_name": "r2"}))
        assert started["status"] in {"queued", "preparing", "running"}
    finally:
        service.shutdown(timeout=5)
        captions.shutdown()


def test_a_caption_job_on_a_dataset_a_run_reads_is_refused(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path], vlm: str
) -> None:
    model = tiny_model("flux")
    other = settings.datasets_dir / "other"
    other.mkdir()
    (other / "a.png").write_bytes((shapes / next(p.name for p in shapes.glob("*.png"))).read_bytes())
    service, captions = wired_services(settings)
    try:
        run = service.submit(_cfg(model, {"data_dir": "shapes", "output_name": "r1"}))
        with pytest.raises(JobActive, match="dataset 'shapes' is used by a live training job"):
            captions.start("shapes", CaptionOptions(model=vlm, overwrite=True))
        with pytest.raises(NotFound):
            captions.latest("shapes")  # the refused job was withdrawn
        assert captions.busy_jobs() == {}
        job = captions.start("other", CaptionOptions(model=vlm))  # another dataset: captioned meanwhile
        assert captions.wait(job["id"], 60)["status"] == "completed"
        service.stop(save=False, job_id=run["id"])
        deadline = time.monotonic() + 30
        while service.datasets_in_use():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        job = captions.start("shapes", CaptionOptions(model=vlm))  # the run ended: the dataset is free
        assert captions.wait(job["id"], 60)["status"] == "completed"
    finally:
        service.shutdown(timeout=5)
        captions.shutdown()


def test_folders_overlap_when_one_lies_in_the_other(tmp_path: Path) -> None:
    assert overlaps(tmp_path / "a", tmp_path / "a")
    assert overlaps(tmp_path / "a", tmp_path / "a" / "10_sks")  # a kohya sub-folder
    assert overlaps(tmp_path / "a" / "10_sks", tmp_path / "a")
    assert not overlaps(tmp_path / "a", tmp_path / "ab")
