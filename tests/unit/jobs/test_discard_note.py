"""A run stopped without save says so in its stored record (RELIABILITY 1907). Its folder goes
(checkpoints, snapshots, previews), and its record read `stopped` with no outputs, no resume point
and no word: `runs show`, GET /api/runs/{id} and the run page could not tell a discard from a stop
before the first step; only the Live page said it, from the job in the server's memory. The
worker's Complete event is folded by the job service as the pump folds it (no worker spawned)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorastudio.config import TrainConfig
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.records import Job, JobStatus, now_iso
from lorastudio.jobs.service import JobService
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings
from lorastudio.training.events import Complete


@pytest.mark.parametrize(
    ("save", "lora"), [(False, None), (True, "/o/o.safetensors"), (None, "/o/o.safetensors")]
)
def test_only_a_discard_is_told_in_the_record(tmp_path: Path, save: bool | None, lora: str | None) -> None:
    settings = Settings(home=tmp_path / "home").ensure_dirs()
    store = RunStore.open(settings.db_path)
    service = JobService(settings, store, GpuArbiter(), worker_target=print)  # never started
    config = TrainConfig.model_validate(
        {"family": "flux", "base_model": "org/model", "data_dir": str(tmp_path / "d"), "output_name": "o"}
    )
    job = Job(id="j1", config=config, worker_config=config)
    store.create_run(job.id, "o", "flux", {}, now_iso())
    job.status, job.generation, job.pid, job.stop_save = JobStatus.RUNNING, 1, 42, save
    stopped = save is not None
    end = Complete(lora_path=lora, steps_run=27, stopped=stopped)
    assert service._ingest(job, (1, 42, end.model_dump(mode="python")))
    run = store.get_run(job.id, max_points=0)
    assert run["status"] == ("stopped" if stopped else "completed")
    if save is False:
        assert run["warnings"] == [
            "stopped without save at step 27: no LoRA was written, and the checkpoints, LoRA snapshots and "
            "sample previews this session wrote were deleted (a resumed run keeps what it resumed from)"
        ]
        assert job.warnings == []  # the Live page says it itself (stop_requested): not twice there
    else:
        assert run["warnings"] == []
    store.close()
