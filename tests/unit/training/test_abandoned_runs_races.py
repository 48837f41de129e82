"""The clean-up of killed runs' empty output folders (jobs/leftovers.py, by `lorastudio train`
and by a server start) removes a folder only while it is empty: a file that lands in it after
it was found empty (the user's own, another program's) is never removed with it, the folder
is kept; the staging of a killed write inside it still goes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.jobs import leftovers
from lorastudio.jobs.leftovers import find_leftovers, remove_abandoned_runs, remove_leftovers
from lorastudio.settings import Settings


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home")


def _empty_run(settings: Settings, name: str) -> Path:
    staging = settings.outputs_dir / name / "checkpoints" / ".staging-0123abcd"
    staging.mkdir(parents=True)
    (staging / "state.pt").write_bytes(b"half a checkpoint")
    (settings.outputs_dir / name / "samples").mkdir()
    return settings.outputs_dir / name


def _file_lands_after_the_check(monkeypatch: pytest.MonkeyPatch, where: Callable[[Path], Path]) -> list[Path]:
    """Once a folder is found holding nothing, a file lands in it (returned list: the files)."""
    real = leftovers._holds_nothing
    landed: list[Path] = []

    def check_then_land(folder: Path, going: set[Path]) -> bool:
        empty = real(folder, going)
        target = where(folder)
        target.write_text("the user's notes")
        landed.append(target)
        return empty

    monkeypatch.setattr(leftovers, "_holds_nothing", check_then_land)
    return landed


@pytest.mark.parametrize("spot", ["top", "nested"])
def test_a_file_landing_in_an_empty_run_folder_after_the_check_is_kept(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, spot: str
) -> None:
    run = _empty_run(settings, "killed")
    landed = _file_lands_after_the_check(
        monkeypatch, lambda f: f / "notes.txt" if spot == "top" else f / "samples" / "notes.txt"
    )
    remove_abandoned_runs(settings)
    assert landed and all(p.read_text() == "the user's notes" for p in landed)
    assert not (run / "checkpoints" / ".staging-0123abcd").exists()  # the killed write's staging goes


def test_the_server_starts_clean_up_keeps_a_file_landing_after_the_listing(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _empty_run(settings, "killed")
    found = find_leftovers(settings)  # listed at the start, removed later in a thread
    (run / "samples" / "mine.png").write_bytes(b"a user's image")
    remove_leftovers(found)
    assert (run / "samples" / "mine.png").read_bytes() == b"a user's image"
    assert not (run / "checkpoints" / ".staging-0123abcd").exists()


def test_an_empty_run_folder_is_still_removed_whole(settings: Settings) -> None:
    run = _empty_run(settings, "killed")
    assert run in remove_abandoned_runs(settings)
    assert not run.exists() and settings.outputs_dir.is_dir()
    run = _empty_run(settings, "killed2")
    remove_leftovers(find_leftovers(settings))
    assert not run.exists()
