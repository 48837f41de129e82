"""The folder of a fresh run killed before its first checkpoint or LoRA (a worker, a rank, the
server with it, a CLI run): a server start and the next `lorastudio train` remove every entry
a run writes in it (training/resume/run_files.py), since the run created and marked the folder
(run_files.mark_fresh) and no other session wrote there; the folder goes when nothing else is in
it. A folder with a checkpoint or the run's LoRA, or without the mark (a resumed run's, one
written before the mark existed), keeps everything but staging, as before. The pump's end of a
job is covered with real killed workers in tests/reliability/test_killed_fresh_run.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorastudio.errors import ConfigError
from lorastudio.jobs.leftovers import find_leftovers, removal_note, remove_abandoned_runs, remove_leftovers
from lorastudio.settings import Settings
from lorastudio.training.resume.fresh_mark import FRESH_MARK, settle
from lorastudio.training.resume.run_files import killed_fresh
from lorastudio.training.resume.run_lock import claim_run_dir, release_run_dir


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home").ensure_dirs()


def _killed_fresh_run(settings: Settings, name: str, release: bool = True) -> Path:
    """A fresh session's folder (claimed and marked as the loop does) holding what a run writes
    before its first checkpoint; the session then dies (its lock dropped) unless not `release`."""
    fd = claim_run_dir(settings.outputs_dir / name)
    run = settings.outputs_dir / name
    for rel in (
        "samples/step-000001-0.png",
        "samples/ref-0-0.png",
        "samples/.staging-0123abcd.png",
        f"loras/{name}-step-000001.safetensors",
        f"loras/{name}-step-000001.json",
        "validation.json",
        "tensorboard/events.out.tfevents.1",
        "checkpoints/.staging-4567cdef/state.pt",
    ):
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        (run / rel).write_bytes(b"written by the run")
    if release:
        release_run_dir(fd)
    return run


def test_a_server_start_removes_what_a_killed_fresh_run_wrote(settings: Settings) -> None:
    run = _killed_fresh_run(settings, "gone")
    assert (run / FRESH_MARK).is_file() and killed_fresh(run)
    remove_leftovers(find_leftovers(settings))
    assert not run.exists()  # was: its samples and snapshots kept it, refusing its name


def test_a_users_file_keeps_the_folder_and_what_holds_it(settings: Settings) -> None:
    run = _killed_fresh_run(settings, "mixed")
    (run / "notes.txt").write_text("mine")
    (run / "samples" / "pick.png").write_text("mine too")
    found = find_leftovers(settings)
    remove_leftovers(found)
    assert sorted(p.relative_to(run).as_posix() for p in run.rglob("*")) == [
        "notes.txt",
        "samples",
        "samples/pick.png",
    ]
    note = removal_note(run, found)
    assert note is not None
    assert note.startswith(f"removed 6 entries the killed fresh run wrote in {run}: ")
    assert "loras/mixed-step-000001.safetensors" in note and "tensorboard" in note.split(";")[0]
    assert note.endswith(f"kept 2 files not written by the run in {run}: notes.txt, samples/pick.png")


def test_a_checkpoint_or_the_runs_lora_keeps_everything_but_staging(settings: Settings) -> None:
    checkpointed = _killed_fresh_run(settings, "ckpt")
    (checkpointed / "checkpoints" / "step-000002").mkdir()  # killed between its rename and `settle`
    finished = _killed_fresh_run(settings, "done")
    (finished / "done.safetensors").write_bytes(b"the run's LoRA")  # killed before `settle`
    assert not killed_fresh(checkpointed) and not killed_fresh(finished)
    remove_leftovers(find_leftovers(settings))
    for run in (checkpointed, finished):
        assert (run / "samples" / "step-000001-0.png").is_file()
        assert (run / "loras" / f"{run.name}-step-000001.safetensors").is_file()
        assert (run / "validation.json").is_file()
        assert not (run / "samples" / ".staging-0123abcd.png").exists()  # staging goes, as before


def test_a_folder_without_the_mark_keeps_its_files(settings: Settings) -> None:
    """A resumed session never marks (its folder holds earlier sessions' files); `settle` is what
    a first checkpoint or LoRA does."""
    run = _killed_fresh_run(settings, "resumed")
    settle(run)
    assert not killed_fresh(run)
    assert removal_note(run, remove_abandoned_runs(settings)) is None
    assert (run / "samples" / "step-000001-0.png").is_file()
    assert (run / "tensorboard" / "events.out.tfevents.1").is_file()
    assert not (run / "checkpoints" / ".staging-4567cdef").exists()


def test_the_next_cli_run_removes_a_killed_fresh_runs_folder_but_never_a_live_one(settings: Settings) -> None:
    killed = _killed_fresh_run(settings, "killed")
    live = _killed_fresh_run(settings, "live", release=False)  # its session still holds the lock
    removed = remove_abandoned_runs(settings)
    assert killed in removed and not killed.exists()
    assert (live / "samples" / "step-000001-0.png").is_file() and (live / FRESH_MARK).is_file()
    assert removal_note(killed, removed) is not None
    assert "its folder is gone, the name 'killed' free" in str(removal_note(killed, removed))


def test_a_fresh_run_never_marks_a_folder_it_did_not_create(settings: Settings) -> None:
    run = settings.outputs_dir / "theirs"
    run.mkdir()
    (run / "samples").mkdir()
    (run / "samples" / "step-000001-0.png").write_bytes(b"someone's")
    with pytest.raises(ConfigError, match="already exists"):
        claim_run_dir(run)
    assert not (run / FRESH_MARK).exists()
    remove_leftovers(find_leftovers(settings))
    assert (run / "samples" / "step-000001-0.png").is_file()
