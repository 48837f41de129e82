"""Caption jobs and the GPU arbiter: a GPU caption job is refused while training holds the GPU
(a CPU one runs), training starting meanwhile stops it before it takes the GPU, cancel keeps
whole caption files, one job at a time. The worker is a real spawned child (caption_fake_workers)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from caption_fake_workers import slow_fake_captioner
from PIL import Image

from lorastudio.captioning.options import CaptionOptions
from lorastudio.errors import ConfigError, JobActive, NotFound
from lorastudio.jobs.captioning import CaptionJobs
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.settings import get_settings


@pytest.fixture
def dataset() -> Path:
    settings = get_settings().ensure_dirs()
    folder = settings.datasets_dir / "ds"
    folder.mkdir()
    for i in range(6):
        Image.new("RGB", (32, 32), (40 * i, 10, 10)).save(folder / f"img{i}.png")
    return folder


@pytest.fixture
def model(tmp_path: Path) -> str:
    folder = tmp_path / "vlm"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen2_5_vl"}', encoding="utf-8")
    return str(folder)


def _jobs(arbiter: GpuArbiter, host: str = "cuda", in_use: set[Path] | None = None) -> CaptionJobs:
    return CaptionJobs(
        get_settings(), arbiter, lambda: in_use or set(), target=slow_fake_captioner, host_device=lambda: host
    )


def _wait_for(jobs: CaptionJobs, job_id: str, done: int) -> None:
    deadline = time.monotonic() + 60
    while jobs.get(job_id)["done"] < done:
        assert time.monotonic() < deadline, jobs.get(job_id)
        time.sleep(0.05)


def _whole(folder: Path) -> dict[str, str]:
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]  # nothing staged left
    return {p.stem: p.read_text(encoding="utf-8") for p in folder.glob("*.txt")}


def test_gpu_job_refused_while_training_cpu_job_runs(dataset: Path, model: str) -> None:
    arbiter = GpuArbiter()
    arbiter.begin_training("train1")
    jobs = _jobs(arbiter)
    try:
        with pytest.raises(JobActive, match="training job train1 is using the GPU.*device 'cpu'"):
            jobs.start("ds", CaptionOptions(model=model))
        job = jobs.start("ds", CaptionOptions(model=model, device="cpu"))
        assert job["device"] == "cpu"
        final = jobs.wait(job["id"], 60)
        assert (final["status"], final["captioned"]) == ("completed", 6)
        assert _whole(dataset)["img0"] == "fake caption of img0 on cpu\n"
        assert [p["file"] for p in final["preview"]] == [f"img{i}.png" for i in range(5)]
    finally:
        jobs.shutdown()


def test_training_start_stops_a_gpu_caption_job_first(dataset: Path, model: str) -> None:
    arbiter = GpuArbiter()
    jobs = _jobs(arbiter)
    try:
        job = jobs.start("ds", CaptionOptions(model=model))
        assert job["device"] == "cuda"
        _wait_for(jobs, job["id"], 1)
        arbiter.begin_training("train1")  # releases the resident: waits for the worker to end
        final = jobs.get(job["id"])
        assert final["status"] == "cancelled" and final["cancel_reason"] == "a training job took the GPU"
        assert 1 <= final["captioned"] < 6
        assert len(_whole(dataset)) == final["captioned"]
        arbiter.end_training("train1")
        arbiter.begin_training("train2")  # the finished job is no longer a resident: nothing waits
    finally:
        jobs.shutdown()


def test_cancel_one_at_a_time_and_refusals(dataset: Path, model: str) -> None:
    jobs = _jobs(GpuArbiter(), host="cpu")
    try:
        job = jobs.start("ds", CaptionOptions(model=model))
        assert job["device"] == "cpu"
        with pytest.raises(JobActive, match=f"caption job {job['id']}"):
            jobs.start("ds", CaptionOptions(model=model))
        _wait_for(jobs, job["id"], 2)
        assert jobs.cancel(job["id"])["cancel_reason"] == "cancelled by the user"
        final = jobs.wait(job["id"], 60)
        assert final["status"] == "cancelled" and 2 <= final["captioned"] < 6
        captions = _whole(dataset)
        assert len(captions) == final["captioned"]
        assert all(
            text.startswith("fake caption of ") and text.endswith(" on cpu\n") for text in captions.values()
        )
        assert jobs.latest("ds")["id"] == job["id"]
        with pytest.raises(NotFound):
            jobs.cancel(job["id"])
        with pytest.raises(ConfigError, match="device"):
            jobs.start("ds", CaptionOptions(model=model, device="cuda"))
        with pytest.raises(NotFound, match="no dataset named 'nope'"):
            jobs.start("nope", CaptionOptions(model=model))
    finally:
        jobs.shutdown()


def test_dataset_used_by_training_is_refused(dataset: Path, model: str) -> None:
    jobs = _jobs(GpuArbiter(), host="cpu", in_use={dataset})
    try:
        with pytest.raises(JobActive, match="used by a live training job"):
            jobs.start("ds", CaptionOptions(model=model))
    finally:
        jobs.shutdown()


def test_a_worker_that_ignores_cancel_is_killed_and_its_staged_file_removed(
    dataset: Path, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from caption_fake_workers import stuck_fake_captioner

    import lorastudio.jobs.captioning as captioning

    monkeypatch.setattr(captioning, "STOP_GRACE_S", 0.5)
    jobs = CaptionJobs(
        get_settings(), GpuArbiter(), set, target=stuck_fake_captioner, host_device=lambda: "cpu"
    )
    try:
        job = jobs.start("ds", CaptionOptions(model=model))
        _wait_for(jobs, job["id"], 1)
        jobs.cancel(job["id"])
        final = jobs.wait(job["id"], 30)
        assert final["status"] == "cancelled" and final["captioned"] == 1
        assert _whole(dataset) == {"img0": "the first caption\n"}  # the staged half-caption is gone
    finally:
        jobs.shutdown()


def test_a_silent_worker_is_stopped_as_hung_and_frees_its_dataset_and_the_gpu(
    dataset: Path, model: str
) -> None:
    """No cancel: a worker silent past its allowance (after an image; before its model loaded)
    is stopped, the job fails naming what timed out, the dataset's claim and the GPU are free."""
    from caption_fake_workers import silent_fake_captioner, stuck_fake_captioner

    from lorastudio.jobs.dataset_claims import WRITE, DatasetClaim
    from lorastudio.jobs.worker_allowance import CaptionAllowance

    settings, arbiter = get_settings(), GpuArbiter()
    quick = CaptionAllowance(load_s=1.0, image_s=1.0, kill_grace_s=0.5)
    for target, what, how in (
        (stuck_fake_captioner, "caption an image within 1.0 s", "(SIGTERM)"),
        (
            silent_fake_captioner,
            "load the captioning model within 1.0 s",
            "(SIGKILL: SIGTERM was ignored for 0.5 s)",
        ),
    ):
        jobs = CaptionJobs(settings, arbiter, set, target=target, host_device=lambda: "cuda", allowance=quick)
        try:
            t0 = time.monotonic()
            job = jobs.start("ds", CaptionOptions(model=model))
            final = jobs.wait(job["id"], 60)
            took = time.monotonic() - t0
            assert final["status"] == "failed", final
            assert final["error"].startswith(
                f"the caption worker did not {what} and was stopped as hung {how}"
            )
            assert "LORASTUDIO_WORKER_TIMEOUT_SCALE" in final["error"]
            assert arbiter._residents == {}  # the GPU is free for training
            DatasetClaim.take(settings.home, settings.datasets_dir, [dataset], WRITE, "test").release()
            print(f"caption worker silent ({what}): job failed {took:.2f} s after its start")
        finally:
            jobs.shutdown()
    assert _whole(dataset) == {"img0": "the first caption\n"}  # the stuck worker's staged file is gone
