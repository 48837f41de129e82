"""A run folder renamed while its run is live, and another folder (another run's) or a link put
at its path: the run's next write (a checkpoint, a sample round, the final LoRA) lands nowhere
there; the run fails naming its folder (training/resume/folder_guard.py) and removes nothing. Was: each
was written by path into what sat there, the final LoRA's rename replacing the other run's LoRA
of that name, through the link into a folder outside the outputs root."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.errors import RunFolderMoved
from lorastudio.settings import get_settings
from lorastudio.training.loop import train
from lorastudio.training.resume import folder_guard

OTHERS = (  # what another run of the same output name keeps in the folder put at the run's path
    "run.safetensors",
    "run.json",
    "samples/step-000001-0.png",
    "checkpoints/step-000001/state.pt",
)
WRITES = {  # the writer the run meets first after its folder moved (at its first step)
    "checkpoint": {"steps": 3, "save_every": 1},
    "sample": {"steps": 3, "sample_prompts": ["a red circle"], "sample_every": 1, "sample_steps": 1},
    "lora": {"steps": 2},
}


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every entry under `folder`: a file's bytes, None for a folder."""
    return {
        p.relative_to(folder).as_posix(): (p.read_bytes() if p.is_file() else None) for p in folder.rglob("*")
    }


@pytest.mark.parametrize(
    ("write", "replacement"),
    [("checkpoint", "folder"), ("sample", "link"), ("lora", "folder"), ("lora", "link")],
)
def test_a_run_whose_folder_moved_writes_nothing_into_what_replaced_it(
    make_config: Callable[..., object], tmp_path: Path, write: str, replacement: str
) -> None:
    run_dir = get_settings().outputs_dir / "run"
    moved = get_settings().outputs_dir / "run-moved"
    other = tmp_path / "elsewhere" if replacement == "link" else run_dir
    events: list = []

    def emit(event: object) -> None:
        events.append(event)
        if getattr(event, "type", None) == "progress" and not moved.exists():
            run_dir.rename(moved)  # its user renames the live run's folder; another takes the path
            for rel in OTHERS:
                (other / rel).parent.mkdir(parents=True, exist_ok=True)
                (other / rel).write_bytes(f"not this run's: {rel}".encode())
            if replacement == "link":
                run_dir.symlink_to(other)

    with pytest.raises(RunFolderMoved, match="was moved or replaced while the run wrote to it"):
        train(make_config(output_name="run", **WRITES[write]), emit, lambda: None, device="cpu")
    before: dict[str, bytes | None] = {rel: f"not this run's: {rel}".encode() for rel in OTHERS}
    before.update({rel: None for rel in ("samples", "checkpoints", "checkpoints/step-000001")})
    assert _tree(other) == before  # was: the run's checkpoint, samples or LoRA written there
    assert moved.is_dir()  # the run's own folder, kept where its user put it
    failed = [e.message for e in events if e.type == "error"]
    assert failed and f"the run folder {run_dir} was moved or replaced" in failed[-1], failed
    assert (
        run_dir not in folder_guard._held
    )  # released with the run (another test's live claim may stay held)
    if replacement == "link":
        assert os.path.islink(run_dir)


def test_the_check_names_the_folder_and_passes_the_held_one_only(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "samples").mkdir(parents=True)
    fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    folder_guard.hold(run_dir, fd)
    try:
        folder_guard.check_folder(run_dir / "samples")  # the held folder: passes
        folder_guard.check_folder(run_dir / "loras")  # not made yet: passes (its parent checked)
        folder_guard.check_folder(tmp_path / "another")  # in no held folder: not checked
        (run_dir / "samples").rmdir()
        (run_dir / "samples").symlink_to(tmp_path)
        with pytest.raises(RunFolderMoved, match="samples is not a folder of the run"):
            folder_guard.check_folder(run_dir / "samples")
        run_dir.rename(tmp_path / "moved")
        run_dir.mkdir()
        with pytest.raises(RunFolderMoved, match=f"the run folder {run_dir} was moved or replaced"):
            folder_guard.check_folder(run_dir)
    finally:
        folder_guard.drop(fd)
        os.close(fd)
    folder_guard.check_folder(run_dir)  # dropped: not checked


def test_a_rename_after_the_check_lands_in_the_folder_the_run_started_in(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "samples").mkdir(parents=True)
    fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    folder_guard.hold(run_dir, fd)
    try:
        staged = run_dir / "samples" / ".staging-0a1b2c3d.png"
        staged.write_bytes(b"the run's sample")
        folder_guard.check_folder(run_dir / "samples")
        run_dir.rename(tmp_path / "moved")  # in the instant between the check and the rename
        (run_dir / "samples").mkdir(parents=True)
        folder_guard.replace_in_run(staged, run_dir / "samples" / "step-000001-0.png")
        assert (tmp_path / "moved" / "samples" / "step-000001-0.png").read_bytes() == b"the run's sample"
        assert list(run_dir.rglob("*")) == [run_dir / "samples"]  # nothing in what took its path
        (run_dir / "samples" / ".staging-0a1b2c3d.png").write_bytes(b"staged in the replacement")
        with pytest.raises(RunFolderMoved):  # a staging written there is not taken from it
            folder_guard.replace_in_run(run_dir / "samples" / ".staging-0a1b2c3d.png", run_dir / "x.png")
    finally:
        folder_guard.drop(fd)
        os.close(fd)
