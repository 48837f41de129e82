"""A live fresh run that starts from another run's LoRA (init_lora: the run's name, or a path under
outputs/) reads that file at its worker's start and again when it loads its denoiser (and any live
run its assistant_lora, at each session's start): a delete of the other run with its files is
refused (409) while the run is queued or running, and a delete that lands after a start's checks
refuses the start (400 naming the setting). Before, DELETE
/api/runs/{id} answered 200 and the run failed at its worker's start, or after its first phases
(RELIABILITY 1921)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jobs_fake_workers as fakes
import pytest
from tests.lora_file import write_flux_lora
from tests.target_check_child import IN_PROCESS
from tests.target_check_patience import patient_target_check  # noqa: F401  (autouse)

from lorastudio.config import TrainConfig
from lorastudio.errors import ConfigError, JobActive
from lorastudio.jobs import service as service_module
from lorastudio.jobs import target_check
from lorastudio.jobs.gone_check import refuse_if_gone
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.records import Job, JobStatus, now_iso
from lorastudio.jobs.run_delete import refuse_if_started_from
from lorastudio.jobs.service import JobService
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings


@pytest.fixture
def service(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[JobService]:
    """A job service whose dispatcher is not started (a submitted run stays queued, no worker),
    the lora-targets check's child run in this process."""
    monkeypatch.setattr(target_check, "subprocess", IN_PROCESS)
    service = JobService(
        settings, RunStore.open(settings.db_path), GpuArbiter(), worker_target=fakes.hang_ignoring_stop
    )
    yield service
    service.shutdown(timeout=5)


@pytest.fixture
def finished(settings: Settings, service: JobService) -> str:
    """The id of a completed run "first" whose LoRA is outputs/first/first.safetensors."""
    settings.ensure_dirs()
    (settings.outputs_dir / "first").mkdir()
    write_flux_lora(settings.outputs_dir / "first" / "first.safetensors")
    service.store.create_run("first-run", "first", "flux", {}, now_iso(), status=JobStatus.COMPLETED)
    return "first-run"


@pytest.fixture
def config(shapes: Path, tiny_model: Callable[[str], Path]) -> dict[str, Any]:
    """A FLUX.1 run "second" on datasets/shapes (the `shapes` fixture) that starts from "first"."""
    return {
        "family": "flux", "base_model": str(tiny_model("flux")), "data_dir": "shapes", "resolution": 32,
        "steps": 3, "output_name": "second", "init_lora": "first",
    }  # fmt: skip


def test_a_run_a_live_run_starts_from_keeps_its_files_until_that_run_ends(
    settings: Settings, service: JobService, finished: str, config: dict[str, Any]
) -> None:
    job = service.submit(config)
    lora = settings.outputs_dir / "first" / "first.safetensors"
    with pytest.raises(JobActive, match=f"is the init_lora of live training job {job['id']}"):
        service.delete_run(finished)
    assert lora.is_file() and service.store.get_run(finished, max_points=0)["status"] == "completed"
    assert service.delete_run(finished, keep_files=True)["files_removed"] is False  # its record only
    assert lora.is_file()
    service.stop(save=False, job_id=job["id"])  # cancelled: the file is no live run's any more
    (settings.outputs_dir / "again").mkdir()
    write_flux_lora(settings.outputs_dir / "again" / "again.safetensors")
    service.store.create_run("again-run", "again", "flux", {}, now_iso(), status=JobStatus.COMPLETED)
    assert service.delete_run("again-run")["files_removed"] is True


def test_a_run_deleted_after_a_starts_checks_refuses_the_start_naming_init_lora(
    service: JobService, finished: str, config: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    planned = service_module.planned_gpu_gib  # called between the start's checks and its queueing

    def delete_meanwhile(*args: Any, **kwargs: Any) -> Any:
        service.delete_run(finished)
        return planned(*args, **kwargs)

    monkeypatch.setattr(service_module, "planned_gpu_gib", delete_meanwhile)
    with pytest.raises(ConfigError) as err:
        service.submit(config)
    (problem,) = err.value.problems
    assert problem.field == "init_lora" and "deleted or moved after the run's checks" in problem.message
    assert service.status()["busy"] is False and [r["id"] for r in service.store.list_runs()] == []


def test_a_run_whose_lora_a_live_run_merges_as_its_assistant_keeps_its_files(
    settings: Settings, finished: str
) -> None:
    """A step-distilled base's assistant_lora (an absolute path) is merged at every session's
    start, a resume's too: a run holding that file is not deleted while such a job is live, and a
    start whose file is gone since its checks is refused naming assistant_lora."""
    lora = settings.outputs_dir / "first" / "first.safetensors"
    config = TrainConfig.model_validate(
        {
            "family": "flux",
            "base_model": str(settings.home),
            "data_dir": "shapes",
            "assistant_lora": str(lora),
        }
    )
    job = Job(id="resumed-job", config=config, worker_config=config)
    with pytest.raises(JobActive, match="is the assistant_lora of live training job resumed-job"):
        refuse_if_started_from([job], {"resumed-job"}, settings, "first")
    refuse_if_started_from([job], set(), settings, "other")  # another run's folder
    lora.unlink()
    with pytest.raises(ConfigError) as err:
        refuse_if_gone(config, [])
    assert [p.field for p in err.value.problems] == ["assistant_lora"]
