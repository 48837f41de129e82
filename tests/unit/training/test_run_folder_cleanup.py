"""A fresh run that fails or is stopped without save removes what a run writes in its folder
(training/resume/run_files.py), never what someone else put there: a user's file and sub-folder,
placed while the run trains (tiny FLUX.1, with samples, validation, snapshots, EMA and
checkpoints on), stay with the folder, and a RunWarning names them. Was: the whole folder went
(shutil.rmtree). With nothing foreign the folder goes as before. Every file a real run writes is
on the one list (a new writer that names its files elsewhere fails here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorastudio.settings import get_settings
from lorastudio.training.events import StopRequest
from lorastudio.training.loop import train
from lorastudio.training.resume.run_files import owned, remove_session_files, staging_path, survey

EVERY_WRITER = {
    "steps": 3,
    "batch_size": 1,
    "sample_prompts": ["a red circle"],
    "sample_every": 1,
    "sample_steps": 1,
    "validation_split": 0.25,
    "validate_every": 1,
    "save_lora_every": 1,
    "ema_decay": 0.9,
}
USER_ENTRIES = {"notes.txt", "mine/", "mine/keep.txt", "samples/mine.png", "empty/"}


class Boom(RuntimeError):
    """The failure injected into a run (Recorder)."""


def _tree(folder: Path) -> set[str]:
    """Every entry under `folder`, relative, folders with a trailing "/"."""
    return {p.relative_to(folder).as_posix() + ("/" if p.is_dir() else "") for p in folder.rglob("*")}


def _user_files(run_dir: Path) -> None:
    """What a user (or another tool) puts into a running run's folder."""
    (run_dir / "notes.txt").write_text("mine")
    (run_dir / "mine").mkdir()
    (run_dir / "mine" / "keep.txt").write_text("mine too")
    (run_dir / "empty").mkdir()
    (run_dir / "samples").mkdir(exist_ok=True)
    (run_dir / "samples" / "mine.png").write_bytes(b"not a sample of the run")


class Recorder:
    """The run's event sink: after step 1 it puts the user's files in (`foreign`) and after
    step `fail_at` it raises Boom (`fail`), once."""

    def __init__(self, foreign: bool, fail: bool, fail_at: int = 2):
        self.events: list = []
        self.foreign, self.fail, self.fail_at = foreign, fail, fail_at

    def __call__(self, event) -> None:
        self.events.append(event)
        if event.type != "progress":
            return
        run_dir = get_settings().outputs_dir / "run"
        if event.step == 1 and self.foreign:
            _user_files(run_dir)
        if event.step == self.fail_at and self.fail:
            self.fail = False
            assert {"samples/", "loras/", "validation.json"} <= _tree(run_dir)  # the run wrote
            raise Boom("injected")

    def warnings(self) -> list[str]:
        return [e.message for e in self.events if e.type == "warning"]


def _stop_after(recorder: Recorder, steps: int = 2, save: bool = False):
    """A stop poll asking to stop (with `save`) once `steps` steps of this session ran."""
    return lambda: (
        StopRequest(save=save) if sum(e.type == "progress" for e in recorder.events) >= steps else None
    )


@pytest.mark.parametrize("foreign", [True, False], ids=["user-files", "nothing-foreign"])
def test_a_failed_fresh_run_removes_only_what_it_wrote(make_config, foreign):
    recorder = Recorder(foreign, fail=True)
    with pytest.raises(Boom):
        train(make_config(**EVERY_WRITER), recorder, device="cpu")
    run_dir = get_settings().outputs_dir / "run"
    assert recorder.events[-1].type == "error"
    if not foreign:
        assert not run_dir.exists() and recorder.warnings() == []
        return
    assert _tree(run_dir) == USER_ENTRIES | {"samples/"}  # the run's samples, snapshots, record: gone
    assert (run_dir / "mine" / "keep.txt").read_text() == "mine too"
    (warning,) = recorder.warnings()
    assert warning == (
        f"kept 2 files and 2 folders not written by the run in {run_dir}: "
        "empty/, mine/, notes.txt, samples/mine.png"
    )


@pytest.mark.parametrize("foreign", [True, False], ids=["user-files", "nothing-foreign"])
def test_a_fresh_run_stopped_without_save_removes_only_what_it_wrote(make_config, foreign):
    recorder = Recorder(foreign, fail=False)
    cfg = make_config(**EVERY_WRITER, save_every=1, keep_last=5)
    result = train(cfg, recorder, _stop_after(recorder), device="cpu")
    assert result.stopped and result.lora_path is None
    run_dir = get_settings().outputs_dir / "run"
    if not foreign:
        assert not run_dir.exists() and recorder.warnings() == []
        return
    assert _tree(run_dir) == USER_ENTRIES | {"samples/"}  # its checkpoints too: a fresh run's
    assert len(recorder.warnings()) == 1 and "notes.txt" in recorder.warnings()[0]


def test_every_file_a_run_writes_is_on_the_list(make_config):
    """A run with every writer (samples, validation, snapshots, EMA's raw LoRA, checkpoints,
    the final LoRA) leaves no entry the list does not know: `survey` finds nothing foreign."""
    events: list = []
    result = train(make_config(**EVERY_WRITER, save_every=1, keep_last=5), events.append, device="cpu")
    run_dir = result.lora_path.parent
    mine, other = survey(run_dir)
    assert other == []
    names = _tree(run_dir)
    for expected in ("run.raw.safetensors", "validation.json", "checkpoints/step-000001/", "loras/"):
        assert expected in names
    assert any(n.startswith("samples/step-") for n in names)
    assert run_dir / "checkpoints" / "step-000002" in mine


def test_the_list_refuses_look_alikes_and_keeps_what_it_does_not_know(tmp_path: Path):
    run_dir = tmp_path / "run"
    (run_dir / "loras").mkdir(parents=True)
    (run_dir / "checkpoints").mkdir()
    for name in ("loras/other-step-000001.safetensors", "run.txt", "checkpoints/notes", "samples"):
        (run_dir / name).write_text("x")
    (run_dir / "loras" / "run-step-000001.safetensors").write_text("snapshot")
    staged = staging_path(run_dir / "checkpoints")
    staged.mkdir()
    assert owned(run_dir, staged) and owned(run_dir, run_dir / "loras" / "run-step-000001.safetensors")
    assert not owned(run_dir, run_dir / "loras" / "other-step-000001.safetensors")  # another run's name
    kept = remove_session_files(run_dir)
    assert kept == ["checkpoints/notes", "loras/other-step-000001.safetensors", "run.txt", "samples"]
    assert _tree(run_dir) == {"checkpoints/", "checkpoints/notes", "loras/", *kept[1:]}


def test_a_resumed_run_that_fails_or_is_discarded_touches_only_its_own_files(make_config):
    """As before: a resume keeps its folder, what it resumed from and whatever else is there; a
    failure removes only staging, a discard only this session's checkpoints, snapshots, samples."""
    cfg = make_config(**EVERY_WRITER, save_every=1, keep_last=5)
    first = Recorder(foreign=False, fail=False)
    train(cfg, first, _stop_after(first, 1, save=True), device="cpu")
    run_dir = get_settings().outputs_dir / "run"
    (run_dir / "notes.txt").write_text("mine")
    before = _tree(run_dir)
    assert "checkpoints/step-000001/" in before

    discarded = Recorder(foreign=False, fail=False)
    train(cfg, discarded, _stop_after(discarded, 1), device="cpu", resume=run_dir)
    assert _tree(run_dir) == before and discarded.warnings() == []

    failed = Recorder(foreign=False, fail=True, fail_at=3)
    with pytest.raises(Boom):
        train(cfg, failed, device="cpu", resume=run_dir)
    after = _tree(run_dir)
    assert before <= after and "checkpoints/step-000002/" in after  # resumable from its own
    assert not [n for n in after if "/.staging-" in n or n.startswith(".staging-")]


@pytest.mark.parametrize("remover", ["session", "leftovers"])
def test_a_fresh_runs_clean_up_cut_short_leaves_its_folder_marked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, remover: str
) -> None:
    """The mark goes last (RELIABILITY 987): a removal cut short after its first entry (a rank
    SIGTERMed by torchrun while it cleaned up after a dead rank) leaves the fresh mark, so the
    next clean-up (`lorastudio train`, a server start) still knows the folder for a killed fresh
    run's and removes the rest. Was: the mark sorted first (".fresh-run"), and a folder of LoRA
    snapshots and samples without it stayed for ever (test_failed_run_folder's CLI launch, at
    times)."""
    from lorastudio.jobs import leftover_removal
    from lorastudio.jobs.leftovers import clear_abandoned_run
    from lorastudio.training.resume import run_files
    from lorastudio.training.resume.fresh_mark import FRESH_MARK, mark_fresh
    from lorastudio.training.resume.run_files import VALIDATION_FILE

    run_dir = tmp_path / "outputs" / "run"
    (run_dir / "loras").mkdir(parents=True)
    (run_dir / "samples").mkdir()
    mark_fresh(run_dir)
    for name in ("loras/run-step-000001.safetensors", "loras/run-step-000002.safetensors"):
        (run_dir / name).write_text("snapshot")
    (run_dir / "samples" / "step-000001-0.png").write_bytes(b"png")
    (run_dir / VALIDATION_FILE).write_text("{}")  # sorts after the mark, as every top entry does
    assert run_files.killed_fresh(run_dir)
    removed: list[str] = []
    real = run_files.remove_entry

    def cut_short(folder: Path, path: Path) -> None:
        if path.name == VALIDATION_FILE:
            raise KeyboardInterrupt  # the process ends inside its clean-up
        removed.append(path.name)
        real(folder, path)

    monkeypatch.setattr(run_files, "remove_entry", cut_short)
    monkeypatch.setattr(leftover_removal, "remove_entry", cut_short)
    with pytest.raises(KeyboardInterrupt):
        if remover == "session":
            run_files.remove_session_files(run_dir)
        else:
            leftover_removal.remove_leftovers([*sorted(run_dir.rglob("*")), run_dir])
    assert (run_dir / FRESH_MARK).is_file() and FRESH_MARK not in removed, removed
    assert run_files.killed_fresh(run_dir)
    monkeypatch.undo()
    clear_abandoned_run(run_dir)  # the next clean-up finishes it
    assert not run_dir.exists()
