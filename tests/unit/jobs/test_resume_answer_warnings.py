"""RELIABILITY 1872: what jobs/resume.validate_resume says of a resume (its `warnings`: a sample
prompt's guidance no preview applies, recorded before the rule) reaches the resume's answer and
its stored run, through the job service's real submit_resume (the checkpoint's checks stood in
for: the slow tests/api/test_api_resume_guidance_slow.py resumes a real klein checkpoint)."""

from __future__ import annotations

from pathlib import Path

import jobs_fake_workers as fakes
import pytest

from lorastudio.config import TrainConfig
from lorastudio.jobs import service as service_module
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.records import JobStatus
from lorastudio.jobs.resume import ValidatedResume
from lorastudio.jobs.service import JobService
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings

SAID = "sample_prompts.0.guidance 4: ... resumes as it was, its previews rendered without it"


def test_the_resume_answer_and_its_run_carry_the_resumes_warnings(
    settings: Settings, shapes: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = {"family": "flux", "base_model": str(tmp_path), "data_dir": str(shapes), "resolution": 32}
    cfg = TrainConfig.model_validate({**raw, "output_name": "old", "steps": 2})  # no model read
    checkpoint = settings.outputs_dir / "old" / "checkpoints" / "step-000001"
    checkpoint.mkdir(parents=True)
    store = RunStore.open(settings.db_path)
    store.create_run(
        "r1", "old", "flux", cfg.model_dump(mode="json"), "2026-12-07T00:00:00", status=JobStatus.STOPPED
    )
    checked = ValidatedResume(
        config=cfg, worker_config=cfg, checkpoint=checkpoint, step=1, total_steps=2, warnings=(SAID,)
    )
    monkeypatch.setattr(service_module, "validate_resume", lambda *a, **kw: checked)
    service = JobService(settings, store, GpuArbiter(), worker_target=fakes.hang_ignoring_stop)  # not started
    try:
        answer = service.submit_resume("r1")
        assert answer["dataset_warnings"] == [SAID]
        assert store.get_run(answer["id"], max_points=0)["dataset_warnings"] == [SAID]
    finally:
        service.shutdown(timeout=5)
