"""Where a GPU caption job runs while training holds GPUs (jobs/caption_gpu.py): the decision on
fake hosts (1 GPU / 2 GPUs; fits / does not fit / unknown), the captioner's need from its
safetensors headers or the catalogue, the run's figures the job service knows (planned at submit,
measured from its progress), and caption jobs placed on a real spawned worker: on the GPU the
training did not reserve, beside the run when it fits, left running when a training starts that
does not need its GPU or leaves room for it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import jobs_fake_workers as fakes
import pytest
from caption_fake_workers import slow_fake_captioner
from PIL import Image

from lorastudio.captioning.options import CaptionOptions
from lorastudio.captioning.source import CaptionerSource
from lorastudio.errors import JobActive
from lorastudio.jobs.caption_gpu import (
    CAPTION_ACTIVATION_FACTOR,
    CUDA_CONTEXT_GIB,
    GIB,
    TRAINING_POOL_FACTOR,
    CaptionNeed,
    Placement,
    TrainingMemory,
    caption_need,
    place_caption,
    planned_gpu_gib,
)
from lorastudio.jobs.captioning import CaptionJobs
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.hardware import HostInfo
from lorastudio.jobs.service import JobService
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings
from polling import WORKER_START_S, until

QWEN_3B = CaptionNeed(3.75e9 * 2 / GIB * CAPTION_ACTIVATION_FACTOR + CUDA_CONTEXT_GIB, "Qwen2.5-VL 3B")
BUDGET_20 = TrainingMemory("t1", 20.0, "its memory_budget_gb", None)


# -- the decision on fake hosts -------------------------------------------------------------------
def test_no_training_takes_the_last_gpu() -> None:
    assert place_caption((80.0,), (), None, CaptionNeed(None, "?")) == Placement(0)
    assert place_caption((80.0, 80.0), (), None, CaptionNeed(None, "?")) == Placement(1)
    with pytest.raises(JobActive, match="no GPU"):
        place_caption((), (), None, QWEN_3B)


def test_two_gpus_training_on_one_the_caption_job_takes_the_other_whatever_it_needs() -> None:
    unknown = TrainingMemory("t1")  # nothing known of the run: not needed on a GPU of its own
    assert place_caption((80.0, 80.0), (0,), unknown, CaptionNeed(None, "?")) == Placement(1)
    assert place_caption((80.0, 80.0, 24.0), (0, 1), unknown, QWEN_3B) == Placement(2)


def test_one_gpu_fits_beside_the_run() -> None:
    # 80 GiB - (20 x 1.1 + 0.5) = 57.5 GiB free; Qwen2.5-VL 3B needs ~8.9 GiB
    assert place_caption((80.0,), (0,), BUDGET_20, QWEN_3B) == Placement(0, beside="t1")
    # a data-parallel run on both GPUs: it shares the last one
    assert place_caption((80.0, 80.0), (0, 1), BUDGET_20, QWEN_3B) == Placement(1, beside="t1")


def test_one_gpu_that_does_not_fit_is_refused_naming_needed_and_free() -> None:
    free = 24.0 - (20.0 * TRAINING_POOL_FACTOR + CUDA_CONTEXT_GIB)  # 1.5 GiB
    with pytest.raises(JobActive) as err:
        place_caption((24.0,), (0,), BUDGET_20, QWEN_3B)
    text = str(err.value)
    assert f"needs about {QWEN_3B.gib:.1f} GiB" in text and f"{free:.1f} GiB is free beside the run" in text
    assert "training job t1 holds GPU 0 (24.0 GiB)" in text and "peak 20.0 GiB, its memory_budget_gb" in text
    assert "on the CPU (device 'cpu')" in text


def test_the_measured_peak_counts_when_larger_than_the_plan() -> None:
    grown = TrainingMemory("t1", 20.0, "the preflight estimate", 70.0)
    assert grown.peak() == (70.0, "its measured peak so far")
    with pytest.raises(JobActive, match="peak 70.0 GiB, its measured peak so far"):
        place_caption((80.0,), (0,), grown, QWEN_3B)  # 80 - 77.5 = 2.5 GiB: fits by the plan, not now
    assert place_caption((80.0,), (0,), TrainingMemory("t1", None, None, 30.0), QWEN_3B).beside == "t1"


def test_unknown_figures_are_refused_naming_which() -> None:
    with pytest.raises(JobActive, match="how much of its memory the run takes is not known yet"):
        place_caption((80.0,), (0,), TrainingMemory("t1"), QWEN_3B)
    need = CaptionNeed(None, "the size of acme/vlm is not known until it is on disk")
    with pytest.raises(JobActive, match="the size of acme/vlm is not known until it is on disk"):
        place_caption((80.0,), (0,), BUDGET_20, need)


def test_the_need_comes_from_the_headers_else_the_catalogue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lorastudio.tiny.vlm import save_tiny_vlm

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    folder = save_tiny_vlm(tmp_path / "vlm")
    model = pytest.importorskip("transformers").Qwen2_5_VLForConditionalGeneration.from_pretrained(folder)
    params = sum(t.numel() for t in model.state_dict().values())
    need = caption_need(CaptionerSource(str(folder), "qwen2_5_vl", None, folder))
    assert need.gib == pytest.approx(params * 2 / GIB * CAPTION_ACTIVATION_FACTOR + CUDA_CONTEXT_GIB)
    assert "safetensors headers" in need.why
    # a partial hub-cache snapshot (one shard of two): its headers would undercount, the row counts
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen2.5-VL-7B-Instruct" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("a" * 40)
    shards = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    (snapshot / "model.safetensors.index.json").write_text(json.dumps({"weight_map": shards}))
    shutil.copy(folder / "model.safetensors", snapshot / shards["a"])
    known = caption_need(CaptionerSource("Qwen/Qwen2.5-VL-7B-Instruct", "qwen2_5_vl", None, None))
    assert known.gib == pytest.approx(8.29e9 * 2 / GIB * 1.2 + 0.5) and "catalogue" in known.why
    unknown = caption_need(CaptionerSource("acme/vlm", "qwen2_5_vl", None, None))
    assert unknown.gib is None and "`lorastudio models fetch acme/vlm`" in unknown.why


# -- the run's figures, known to the job service ----------------------------------------------------
def test_the_planned_peak_is_the_budget_else_the_preflight_estimate_on_a_gpu_host(
    tiny_model: Callable[[str], Path], shapes: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lorastudio.jobs.hardware as hardware
    from lorastudio.jobs.preflight import estimate_memory_gb, plan_for_estimate
    from lorastudio.jobs.validation import validate_run

    raw = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": "shapes", "resolution": 32}
    run = validate_run(raw, settings, live_output_names=set())
    assert planned_gpu_gib(run.config, run.model_dir, run.scan) is None  # a CPU host: no GPU figure
    gpu = HostInfo("cuda", "H200", 139.8, ("auto", "fp32", "fp16", "bf16"), 1, (139.8,))
    monkeypatch.setattr(hardware, "host_info", lambda: gpu)
    gib, source = planned_gpu_gib(run.config, run.model_dir, run.scan) or (0.0, "")
    expected = estimate_memory_gb(run.config, run.model_dir, plan_for_estimate(run.config, gpu), 0.0)
    assert source == "the preflight estimate" and gib == pytest.approx(expected["estimated_gb"] * 1e9 / GIB)
    budget = run.config.model_copy(update={"memory_budget_gb": 30.0})
    assert planned_gpu_gib(budget, run.model_dir, run.scan) == (30.0, "its memory_budget_gb")
    assert planned_gpu_gib(run.config, None, None) is None  # a hub id: nothing local to size


def test_the_service_publishes_the_live_run_s_measured_peak(
    settings: Settings, tiny_model: Callable[[str], Path], shapes: Path
) -> None:
    service = JobService(
        settings, RunStore.open(settings.db_path), GpuArbiter(), worker_target=fakes.step_with_peak_then_wait
    ).start()
    try:
        assert service.training_memory() is None
        cfg = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": "shapes", "resolution": 32,
               "steps": 3, "output_name": "peak"}  # fmt: skip
        job = service.submit(cfg)

        def measured() -> TrainingMemory | None:
            known = service.training_memory()
            return known if known is not None and known.measured_gib is not None else None

        known = until(measured, WORKER_START_S, "measured peak of the started worker")
        assert known == TrainingMemory(job["id"], None, None, 12.5)  # a CPU host: no planned figure
        service.stop(save=False)
        until(lambda: service.job(job["id"])["status"] in {"stopped", "completed"}, 30, "end after the stop")
        assert service.training_memory() is None
    finally:
        service.shutdown()


# -- caption jobs on a real spawned worker ----------------------------------------------------------
@pytest.fixture
def dataset(settings: Settings) -> Path:
    folder = settings.datasets_dir / "ds"
    folder.mkdir()
    for i in range(4):
        Image.new("RGB", (32, 32), (60 * i, 10, 10)).save(folder / f"img{i}.png")
    return folder


@pytest.fixture
def model(tmp_path: Path) -> str:
    """A captioner folder whose safetensors header says 3.75 B parameters (no weights behind it:
    the fake worker does not load it)."""
    import struct

    folder = tmp_path / "vlm"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen2_5_vl"}', encoding="utf-8")
    n = 3_750_000_000
    header = json.dumps({"w": {"dtype": "BF16", "shape": [n], "data_offsets": [0, 2 * n]}}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    return str(folder)


def _jobs(
    settings: Settings, arbiter: GpuArbiter, gpus: tuple[float, ...], known: TrainingMemory | None
) -> CaptionJobs:
    return CaptionJobs(
        settings, arbiter, set, target=slow_fake_captioner, host_device=lambda: "cuda",
        gpus=lambda: gpus, training_memory=lambda: known,
    )  # fmt: skip


def _texts(folder: Path) -> set[str]:
    return {p.read_text(encoding="utf-8").split(" on ", 1)[1].strip() for p in folder.glob("*.txt")}


def test_two_gpus_the_caption_job_runs_on_the_one_training_did_not_reserve(
    settings: Settings, dataset: Path, model: str
) -> None:
    arbiter = GpuArbiter()
    arbiter.begin_training("t1")  # GPU 0
    jobs = _jobs(settings, arbiter, (80.0, 80.0), None)
    try:
        job = jobs.start("ds", CaptionOptions(model=model))
        assert (job["device"], job["gpu"], job["beside_training"]) == ("cuda", 1, None)
        assert jobs.models_in_use() == {Path(model).resolve()}  # not deleted under the running job
        final = jobs.wait(job["id"], 60)
        assert jobs.models_in_use() == set()
        assert (final["status"], final["captioned"]) == ("completed", 4)
        assert _texts(dataset) == {"cuda:1"}  # the worker was given exactly GPU 1
    finally:
        jobs.shutdown()


def test_a_training_start_leaves_a_caption_job_on_another_gpu_or_fitting_beside_running(
    settings: Settings, dataset: Path, model: str
) -> None:
    for gpus, known, beside in (((80.0, 80.0), None, None), ((80.0,), BUDGET_20, "t1")):
        arbiter = GpuArbiter()
        jobs = _jobs(settings, arbiter, gpus, known)
        try:
            job = jobs.start("ds", CaptionOptions(model=model, overwrite=True))
            assert job["gpu"] == len(gpus) - 1
            arbiter.begin_training("t1")  # reserves GPU 0: the resident is asked whether it stays
            assert jobs.get(job["id"])["status"] == "running"
            final = jobs.wait(job["id"], 60)
            assert (final["status"], final["captioned"], final["beside_training"]) == ("completed", 4, beside)
            arbiter.end_training("t1")
        finally:
            jobs.shutdown()


def test_one_gpu_too_small_is_refused_with_the_numbers_and_a_training_start_stops_the_job(
    settings: Settings, dataset: Path, model: str
) -> None:
    arbiter = GpuArbiter()
    arbiter.begin_training("t1")
    jobs = _jobs(settings, arbiter, (24.0,), BUDGET_20)
    try:
        with pytest.raises(JobActive, match=r"needs about 8\.9 GiB .* and 1\.5 GiB is free beside the run"):
            jobs.start("ds", CaptionOptions(model=model))
        assert arbiter._residents == {}
        assert jobs.start("ds", CaptionOptions(model=model, device="cpu"))["gpu"] is None  # the CPU runs
    finally:
        jobs.shutdown()
        arbiter.end_training("t1")
    arbiter = GpuArbiter()
    jobs = _jobs(settings, arbiter, (24.0,), BUDGET_20)
    try:
        job = jobs.start("ds", CaptionOptions(model=model, overwrite=True))
        arbiter.begin_training("t1")  # does not fit beside: stopped before training takes the GPU
        final = jobs.get(job["id"])
        assert final["status"] == "cancelled" and final["cancel_reason"] == "a training job took the GPU"
    finally:
        jobs.shutdown()


def test_admitting_a_resident_is_refused_when_training_changed_meanwhile() -> None:
    arbiter = GpuArbiter()
    arbiter.begin_training("t1")
    with pytest.raises(JobActive, match="training job t1 took the GPU while this was decided"):
        arbiter.admit_resident("r", lambda: None, None, training=None)
    arbiter.admit_resident("r", lambda: None, lambda devices: True, training="t1")
    arbiter.end_training("t1")
    released: list[str] = []
    arbiter.register_resident("gen", lambda: released.append("gen"))
    arbiter.begin_training("t2")
    assert released == ["gen"] and "r" in arbiter._residents  # "r" stays, "gen" freed its memory
