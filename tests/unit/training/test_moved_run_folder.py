"""A run folder renamed (or replaced by a link) while its run is live: the session's own removal
(a stop without save, a failure) removes nothing in what now sits at its path (training/loop.py
`_may_remove`, run_lock.holds: the folder must be the one it claimed). Was: a fresh run stopped
without save removed every file a run writes there (another run's LoRA, samples, validation
record, tracker folder), following a link to a folder outside the outputs root."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.settings import get_settings
from lorastudio.training.events import StopRequest
from lorastudio.training.loop import train

OTHERS = (  # what another run (or a user) keeps in the folder put at the run's path
    "run.safetensors",
    "run.json",
    "validation.json",
    "samples/step-000001-0.png",
    "loras/run-step-000001.safetensors",
    "tensorboard/events.out.tfevents.1",
)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _fill(folder: Path) -> None:
    for rel in OTHERS:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(f"not this run's: {rel}".encode())


@pytest.mark.parametrize("replacement", ["folder", "link"])
def test_a_stop_without_save_removes_nothing_once_its_folder_was_moved(
    make_config: Callable[..., object], tmp_path: Path, replacement: str
) -> None:
    run_dir = get_settings().outputs_dir / "run"
    moved = get_settings().outputs_dir / "run-moved"
    other = tmp_path / "elsewhere" if replacement == "link" else run_dir
    events: list = []

    def stop() -> StopRequest | None:
        if not any(e.type == "progress" for e in events):
            return None
        if not moved.exists():  # moved by its user while the run is live, another put in its place
            run_dir.rename(moved)
            _fill(other)
            if replacement == "link":
                run_dir.symlink_to(other)
        return StopRequest(save=False)

    train(make_config(steps=6), events.append, stop, device="cpu")
    assert sorted(_files(other)) == sorted(OTHERS)  # was: every one but the user's files removed
    assert all(body.startswith(b"not this run's") for body in _files(other).values())
    assert moved.is_dir() and (moved / ".fresh-run").is_file()  # the run's own, kept as it was
    warned = [e.message for e in events if e.type == "warning"]
    assert any("is no longer the folder this run wrote" in w for w in warned), warned
    if replacement == "link":
        assert os.path.islink(run_dir)
