"""Cross-process dataset claims (jobs/dataset_claims.py): caption writers (a server caption job,
`lorastudio datasets caption`) and readers (a server run, a CLI `lorastudio train`) on the same
dataset refuse each other, naming the dataset and the holder, across real processes; readers
share; a holder killed with SIGKILL leaves nothing stuck."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from pathlib import Path

import jobs_fake_workers as fakes
import pytest
from caption_fake_workers import slow_fake_captioner, waiting_fake_captioner
from typer.testing import CliRunner

from forked_cli import finish, start_cli
from lorastudio.captioning.options import CaptionOptions
from lorastudio.errors import DatasetBusy
from lorastudio.jobs.captioning import CaptionJobs
from lorastudio.jobs.dataset_claims import CLAIMS_DIR, READ, WRITE, DatasetClaim, claim_root
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.service import JobService, Timeouts
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings


@pytest.fixture
def vlm(tmp_path: Path) -> str:
    """A model folder the captioner resolution accepts (the refusals come before any load)."""
    folder = tmp_path / "vlm"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen2_5_vl"}', encoding="utf-8")
    return str(folder)


def _take(settings: Settings, folder: Path | str, mode: str, holder: str = "test") -> DatasetClaim:
    return DatasetClaim.take(settings.home, settings.datasets_dir, [folder], mode, holder)


def _cli(log: Path, *args: str) -> BaseProcess:
    """A real `lorastudio` CLI process, forked from this one (tests/forked_cli.py: its own pid,
    claims and exit status; the test's LORASTUDIO_HOME), its output in `log`."""
    return start_cli(log, *args)


def _train_config(tmp_path: Path, model: Path, name: str, steps: int = 100_000) -> Path:
    config = tmp_path / f"{name}.json"
    body = {"family": "flux", "base_model": str(model), "data_dir": "shapes", "resolution": 32}
    config.write_text(json.dumps({**body, "steps": steps, "output_name": name}), encoding="utf-8")
    return config


def _wait_for_holder(settings: Settings, pid: int, proc: BaseProcess, log: Path) -> None:
    deadline = time.monotonic() + 120
    while not list((settings.home / CLAIMS_DIR).glob(f"*.{pid}-*.holder")):
        assert proc.is_alive(), log.read_text(encoding="utf-8")
        assert time.monotonic() < deadline, "the CLI run never claimed its dataset"
        time.sleep(0.1)


def _captions(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.txt"))}


def test_readers_share_a_writer_is_alone(settings: Settings, shapes: Path, tmp_path: Path) -> None:
    with _take(settings, "shapes", READ, "run a"), _take(settings, shapes, READ, "run b"):
        with pytest.raises(DatasetBusy) as refused:
            _take(settings, shapes / "10_sks", WRITE)  # a kohya sub-folder is its dataset
        message = str(refused.value)
        assert message.startswith(f"dataset 'shapes' ({shapes.resolve()}) is being read by run ")
        assert f"run a (pid {os.getpid()})" in message and f"run b (pid {os.getpid()})" in message
        assert "its captions cannot be written" in message
        _take(settings, settings.datasets_dir / "other", WRITE).release()  # another dataset
    with (
        _take(settings, shapes, WRITE, "caption job 1a2b"),
        pytest.raises(DatasetBusy, match=r"having its captions written by caption job 1a2b .*cannot read"),
    ):
        _take(settings, "shapes", READ)
    outside = tmp_path / "mine"
    assert claim_root(outside / "sub", settings.datasets_dir) == outside / "sub"  # outside: itself
    with _take(settings, outside, WRITE), pytest.raises(DatasetBusy):  # all or nothing
        DatasetClaim.take(settings.home, settings.datasets_dir, ["shapes", outside], READ, "x")
    _take(settings, shapes, WRITE).release()  # the refused multi-claim left "shapes" free
    assert list((settings.home / CLAIMS_DIR).glob("*.holder")) == []  # every record removed


def test_cli_caption_refused_while_a_cli_train_reads_then_free_after_kill_9(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path], vlm: str, tmp_path: Path
) -> None:
    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    before = _captions(shapes)
    log = tmp_path / "train.log"
    train = _cli(log, "train", str(_train_config(tmp_path, tiny_model("flux"), "r1")), "--device", "cpu")
    try:
        _wait_for_holder(settings, train.pid, train, log)
        caption = CliRunner().invoke(app, ["datasets", "caption", "shapes", "--model", vlm])
        assert caption.exit_code == 3, caption.output
        assert "dataset shapes not captioned: dataset 'shapes'" in caption.output
        assert f"being read by `lorastudio train` (r1) (pid {train.pid})" in caption.output
        jobs = CaptionJobs(settings, GpuArbiter(), target=slow_fake_captioner, host_device=lambda: "cpu")
        with pytest.raises(DatasetBusy, match=rf"`lorastudio train` \(r1\) \(pid {train.pid}\)"):
            jobs.start("shapes", CaptionOptions(model=vlm))  # the server's caption job: 409
        assert jobs.busy_jobs() == {}  # withdrawn
        assert _captions(shapes) == before  # nothing written
    finally:
        train.kill()
        train.join(30)
    assert train.exitcode == -signal.SIGKILL
    t0 = time.monotonic()
    with _take(settings, shapes, WRITE):  # free at once: the kernel dropped the dead run's lock
        assert time.monotonic() - t0 < 1
        assert [
            p.name for p in (settings.home / CLAIMS_DIR).glob("*.holder") if f".{train.pid}-" in p.name
        ] == []


def test_a_server_caption_job_refuses_cli_train_and_cli_caption(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path], vlm: str, tmp_path: Path
) -> None:
    model = tiny_model("flux")
    jobs = CaptionJobs(settings, GpuArbiter(), target=waiting_fake_captioner, host_device=lambda: "cpu")
    job = jobs.start("shapes", CaptionOptions(model=vlm, overwrite=True))  # runs until cancelled
    try:
        logs = tmp_path / "train.log", tmp_path / "caption.log"
        train = _cli(logs[0], "train", str(_train_config(tmp_path, model, "r2", steps=2)), "--device", "cpu")
        caption = _cli(logs[1], "datasets", "caption", "shapes", "--model", vlm)
        (train_code, train_out), (caption_code, caption_out) = (
            finish(train, logs[0]),
            finish(caption, logs[1]),
        )
        holder = f"having its captions written by caption job {job['id']} (pid {os.getpid()})"
        assert train_code == 2 and "dataset 'shapes'" in train_out and holder in train_out, train_out
        assert caption_code == 3 and holder in caption_out, caption_out
        assert jobs.get(job["id"])["status"] == "running"  # the job was not disturbed
    finally:
        jobs.cancel(job["id"])
        jobs.wait(job["id"], 60)
        jobs.shutdown()
    _take(settings, shapes, READ).release()  # the ended job released its claim


def test_a_server_run_refuses_cli_caption(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path], vlm: str
) -> None:
    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    service = JobService(
        settings,
        RunStore.open(settings.db_path),
        GpuArbiter(),
        worker_target=fakes.hang_ignoring_stop,
        timeouts=Timeouts(stop_grace_s=0.5, kill_grace_s=0.5),
    ).start()
    try:
        cfg = {"family": "flux", "base_model": str(tiny_model("flux")), "resolution": 32, "steps": 3}
        run = service.submit({**cfg, "data_dir": "shapes", "output_name": "r3"})
        caption = CliRunner().invoke(app, ["datasets", "caption", "shapes", "--model", vlm])
        assert caption.exit_code == 3, caption.output
        assert f"training job {run['id']} of the lorastudio server (pid {os.getpid()})" in caption.output
        service.stop(save=False, job_id=run["id"])
        deadline = time.monotonic() + 30
        while service.datasets_in_use():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        _take(settings, shapes, WRITE).release()  # the ended run released its claim
    finally:
        service.shutdown(timeout=5)
