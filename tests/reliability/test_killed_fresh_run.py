"""A fresh run killed (kill -9 of its worker) after it wrote samples and LoRA snapshots but no
checkpoint leaves nothing of its own: its folder was created and marked by that run
(training/resume/run_files.mark_fresh), so every entry in it that runs write was its session's and
goes (jobs/leftovers.py); the folder goes when nothing else is in it, and its name is free.
A user's file stays with the folder; the run record says what went and what stayed. Was: the
samples and snapshots kept the folder, which refused its name to every new run. A killed
resumed run (and a fresh one killed after its first checkpoint) keeps every file of earlier
sessions: only staging goes."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

from reliability_helpers import FINAL, LiveServer, wait_for, writing_config

from lorastudio.settings import Settings
from lorastudio.training.resume.fresh_mark import FRESH_MARK, FreshMark, read_mark


def _files(run_dir: Path, folder: str, pattern: str) -> list[str]:
    return sorted(p.name for p in (run_dir / folder).glob(pattern)) if (run_dir / folder).is_dir() else []


def _has_samples_and_snapshot(run_dir: Path) -> bool:
    return bool(_files(run_dir, "samples", "step-*.png")) and bool(_files(run_dir, "loras", "*.safetensors"))


def _kill_when(server: LiveServer, job_id: str, ready: Callable[[], bool]) -> dict:
    """kill -9 job `job_id`'s worker once `ready()`, and wait for the job's end."""
    service = server.app.state.service
    wait_for(lambda: ready() or service.job(job_id)["status"] in FINAL, 240, "the run's files", 0.02)
    assert service.job(job_id)["status"] not in FINAL, service.job(job_id)["error"]
    os.kill(service.job(job_id)["pid"], signal.SIGKILL)
    return wait_for(lambda: (s := service.job(job_id))["status"] in FINAL and s, 60, "the job's end", 0.02)


def _start(server: LiveServer, config: dict) -> str:
    started = server.client.post("/api/train/start", json={"config": config})
    assert started.status_code == 201, started.text
    return started.json()["id"]


def test_a_killed_fresh_run_leaves_none_of_its_samples_or_snapshots(
    server: LiveServer, settings: Settings, flux_config: Callable[..., dict]
) -> None:
    run_dir = settings.outputs_dir / "wrote"
    job_id = _start(server, writing_config(flux_config, "wrote"))
    marks: list[FreshMark | None] = []

    def ready() -> bool:
        if _has_samples_and_snapshot(run_dir):
            marks.append(read_mark(run_dir))
        return bool(marks)

    job = _kill_when(server, job_id, ready)
    assert marks[0] is not None and marks[0].run_id == job_id  # the worker names its job in the mark
    assert job["status"] == "failed"
    assert not run_dir.exists()  # its samples, snapshots, validation-free folder: all its own
    record = server.client.get(f"/api/runs/{job_id}").json()
    notes = [w for w in record["warnings"] if "the killed fresh run wrote" in w]
    assert len(notes) == 1, record["warnings"]
    assert "samples/step-" in notes[0] and "loras/wrote-step-" in notes[0]
    assert "its folder is gone, the name 'wrote' free" in notes[0]
    # the name is free for the next run at once
    again = _start(server, flux_config(output_name="wrote", steps=1))
    done = wait_for(lambda: (s := server.app.state.service.job(again))["status"] in FINAL and s, 120, "rerun")
    assert done["status"] == "completed", done["error"]
    assert not (run_dir / FRESH_MARK).exists()  # a run with its LoRA is no fresh one any more


def test_a_users_file_stays_in_a_killed_fresh_runs_folder(
    server: LiveServer, settings: Settings, flux_config: Callable[..., dict]
) -> None:
    run_dir = settings.outputs_dir / "shared"
    job_id = _start(server, writing_config(flux_config, "shared"))

    def ready() -> bool:
        if not _has_samples_and_snapshot(run_dir):
            return False
        (run_dir / "notes.txt").write_text("mine")
        (run_dir / "samples" / "my-pick.png").write_bytes(b"mine too")
        return True

    job = _kill_when(server, job_id, ready)
    assert job["status"] == "failed"
    assert (run_dir / "notes.txt").read_text() == "mine"
    assert (run_dir / "samples" / "my-pick.png").read_bytes() == b"mine too"
    assert _files(run_dir, "samples", "step-*") == []  # the run's samples went
    assert not (run_dir / "loras").exists()  # its snapshots, then the empty folder
    assert sorted(os.listdir(run_dir)) == ["notes.txt", "samples"]
    record = server.client.get(f"/api/runs/{job_id}").json()
    notes = [w for w in record["warnings"] if "the killed fresh run wrote" in w]
    assert len(notes) == 1, record["warnings"]
    assert f"kept 2 files not written by the run in {run_dir}: notes.txt, samples/my-pick.png" in notes[0]


def _all_files(run_dir: Path) -> set[str]:
    return {p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_file()}


def test_a_killed_resumed_run_keeps_its_earlier_sessions_files(
    server: LiveServer, settings: Settings, flux_config: Callable[..., dict]
) -> None:
    run_dir = settings.outputs_dir / "resumed"
    # every checkpoint kept: the resume's rotation (keep_last) would remove earlier ones by design
    job_id = _start(server, writing_config(flux_config, "resumed", save_every=2, keep_last=1000))
    checkpoint = run_dir / "checkpoints" / "step-000002"
    job = _kill_when(server, job_id, lambda: checkpoint.is_dir() and _has_samples_and_snapshot(run_dir))
    assert job["status"] == "failed"
    # a fresh run killed after its first checkpoint keeps it all (resumable)
    # staging a kill interrupted is not the session's output: it goes with the next clean-up
    earlier = {f for f in _all_files(run_dir) if ".staging-" not in f}
    assert any(f.startswith("samples/step-") for f in earlier), earlier
    assert any(f.startswith("loras/resumed-step-") for f in earlier), earlier
    assert "checkpoints/step-000002/identity.json" in earlier
    assert FRESH_MARK not in earlier  # settled by the checkpoint
    resumed = server.client.post(f"/api/runs/{job_id}/resume", json={})
    assert resumed.status_code == 201, resumed.text
    again = resumed.json()["id"]
    service = server.app.state.service
    start_step = service.job(again)["steps_run"]
    wait_for(lambda: service.job(again)["status"] == "running", 120, "the resume's start", 0.02)
    job = _kill_when(
        server, again, lambda: (service.job(again)["progress"] or {}).get("step", 0) >= max(start_step, 2) + 2
    )
    assert job["status"] == "failed"
    after = _all_files(run_dir)
    assert earlier - after == set(), sorted(earlier - after)  # nothing of the earlier session went
    assert not any(".staging-" in f for f in after)
    record = server.client.get(f"/api/runs/{again}").json()
    assert not [w for w in record["warnings"] if "the killed fresh run wrote" in w]
