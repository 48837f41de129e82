"""Attacks on the removal of what a killed fresh run wrote (jobs/leftovers.py,
training/resume/run_files.py, training/resume/fresh_mark.py): it deletes files, so whatever is planted in or
around an output folder, it removes nothing but what that run wrote. Each attack runs against
both removers: a server start (`find_leftovers` + `remove_leftovers`, under the home lock) and
the next `lorastudio train` (`remove_abandoned_runs`, under each folder's lock). The engine's
own removal in a folder moved while its run was live: tests/unit/training/test_moved_run_folder.py."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.jobs.leftovers import (
    clear_abandoned_run,
    clear_abandoned_runs,
    find_leftovers,
    killed_fresh_runs,
    remove_leftovers,
)
from lorastudio.settings import Settings
from lorastudio.training.resume.fresh_mark import FRESH_MARK, MARK_MAX_BYTES, read_mark
from lorastudio.training.resume.run_files import killed_fresh
from lorastudio.training.resume.run_lock import claim_run_dir, release_run_dir


def _server_start(settings: Settings) -> dict[Path, str | None]:
    """A server start's clean-up; returns {folder: the run whose record gets the note}."""
    fresh = killed_fresh_runs(settings)
    remove_leftovers(find_leftovers(settings))
    return fresh


def _next_cli_run(settings: Settings) -> dict[Path, str | None]:
    """The next `lorastudio train`'s clean-up; returns {folder: the run whose record gets the note}."""
    return {c.run: c.run_id for c in clear_abandoned_runs(settings) if c.run_id is not None}


REMOVERS = pytest.mark.parametrize(
    "remove", [_server_start, _next_cli_run], ids=["server-start", "next-cli-run"]
)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home").ensure_dirs()


def _write(folder: Path, *rels: str) -> None:
    for rel in rels:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(f"{folder.name}/{rel}".encode())


def _killed(settings: Settings, name: str, run_id: str = "0123456789ab") -> Path:
    """A fresh run's folder, claimed and marked as the loop does, holding a sample and a LoRA
    snapshot; then its session dies (its lock dropped)."""
    fd = claim_run_dir(settings.outputs_dir / name, run_id)
    run = settings.outputs_dir / name
    _write(run, "samples/step-000001-0.png", f"loras/{name}-step-000001.safetensors")
    release_run_dir(fd)
    return run


def _tree(folder: Path) -> dict[str, str]:
    """Every entry under `folder` (not following links): a link as its target, a file as its
    bytes, a folder as "/", anything else as "(special)"."""
    found: dict[str, str] = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root, name)
            rel = path.relative_to(folder).as_posix()
            if path.is_symlink():
                found[rel] = f"-> {os.readlink(path)}"
            elif path.is_dir():
                found[rel] = "/"
            elif not path.is_file():  # a FIFO: never opened
                found[rel] = "(special)"
            else:
                found[rel] = path.read_bytes().decode(errors="replace")
    return found


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A folder outside the home holding files named as a run's."""
    folder = tmp_path / "victim"
    _write(folder, "step-000001-0.png", "validation.json", "x-step-000002.safetensors", "inner/keep.txt")
    return folder


@REMOVERS
def test_links_planted_in_a_killed_runs_folder_are_neither_followed_nor_removed(
    settings: Settings, victim: Path, remove: Callable[[Settings], dict[Path, str | None]]
) -> None:
    before = _tree(victim)
    run = _killed(settings, "x")
    links = {
        "validation.json": victim / "validation.json",  # a link to a file, named as the run's
        "x.raw.json": victim / "validation.json",
        "samples/step-000002-0.png": victim / "step-000001-0.png",
        "loras/x-step-000002.safetensors": victim / "x-step-000002.safetensors",
        "tensorboard": victim,  # a link to a folder, named as a tracker's
        "checkpoints/.staging-89abcdef": victim / "inner",  # named as a staged write
        ".staging-0badf00d": victim,
        ".removing-0badf00d": victim / "inner",
    }
    for rel, target in links.items():
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        (run / rel).symlink_to(target)
    moved = _killed(settings, "y")  # its writer folders are links to a folder
    shutil.rmtree(moved / "samples")
    (moved / "samples").symlink_to(victim)
    (victim / "y-step-000001.safetensors").write_bytes(b"victim")
    shutil.rmtree(moved / "loras")
    (moved / "loras").symlink_to(victim)
    before = _tree(victim)
    remove(settings)
    assert _tree(victim) == before  # nothing outside followed
    left = _tree(run)
    for rel, target in links.items():  # was: each link unlinked (the run never writes a link)
        assert left[rel] == f"-> {target}", rel
    assert "samples/step-000001-0.png" not in left and "loras/x-step-000001.safetensors" not in left
    assert _tree(moved) == {"samples": f"-> {victim}", "loras": f"-> {victim}"}  # its mark went, no more


@REMOVERS
def test_a_mark_copied_into_another_folder_removes_nothing_there(
    settings: Settings, tmp_path: Path, remove: Callable[[Settings], dict[Path, str | None]]
) -> None:
    source = _killed(settings, "a")
    mark = (source / FRESH_MARK).read_bytes()
    other = settings.outputs_dir / "b"  # a run's folder whose LoRA its user deleted
    _write(other, "samples/step-000004-0.png", "loras/b-step-000004.safetensors", "validation.json")
    elsewhere = tmp_path / "elsewhere"  # outside the outputs root, and linked into it
    _write(elsewhere, "samples/step-000004-0.png", "loras/elsewhere-step-000004.safetensors")
    for folder in (other, elsewhere):
        (folder / FRESH_MARK).write_bytes(mark)
    (settings.outputs_dir / "elsewhere").symlink_to(elsewhere)
    outside = tmp_path / "claimed"  # a fresh run's own valid mark, outside the root, linked in
    release_run_dir(claim_run_dir(outside, "ba9876543210"))
    _write(outside, "samples/step-000001-0.png")
    (settings.outputs_dir / "claimed").symlink_to(outside)
    kept = {folder: _tree(folder) for folder in (other, elsewhere, outside)}
    assert not killed_fresh(other) and not killed_fresh(elsewhere)  # was: both read as killed fresh
    remove(settings)
    assert not source.exists()  # the real one went
    assert {folder: _tree(folder) for folder in kept} == kept  # was: b's samples and snapshot removed
    assert clear_abandoned_run(settings.outputs_dir / "claimed").removed == []  # the pump's: a link


MARKS: dict[str, Callable[[Path], None]] = {
    "empty": lambda m: m.write_bytes(b""),
    "dot-dot": lambda m: m.write_text("../../victim.txt\n"),
    "absolute": lambda m: m.write_text(f"{m.parent.parent.parent / 'victim.txt'}\n"),
    "nul": lambda m: m.write_bytes(b"victim.txt\0../x"),
    "json-dot-dot": lambda m: _json_mark(m, folder="../x"),
    "json-run-path": lambda m: _json_mark(m, run="../../victim.txt"),
    "json-nul": lambda m: _json_mark(m, folder="x\0"),
    "json-extra": lambda m: _json_mark(m, path="/victim.txt"),
    "huge": lambda m: m.write_text(_json_body(m) + " " * MARK_MAX_BYTES),
    "fifo": lambda m: os.mkfifo(m),
    "link-to-a-valid-mark": lambda m: m.symlink_to(m.parent.parent / "real" / FRESH_MARK),
    "folder": lambda m: m.mkdir(),
}


def _json_body(mark: Path, **over: object) -> str:
    info = os.stat(mark.parent)
    fields = {"folder": mark.parent.name, "device": info.st_dev, "inode": info.st_ino, "run": "0123456789ab"}
    return json.dumps({**fields, **over})


def _json_mark(mark: Path, **over: object) -> None:
    mark.write_text(_json_body(mark, **over), encoding="utf-8")


@pytest.mark.parametrize("kind", sorted(MARKS))
def test_a_mark_that_is_not_one_removes_nothing(settings: Settings, kind: str) -> None:
    real = _killed(settings, "real")  # a killed run's valid mark, for the link to point at
    (real / "notes.txt").write_text("keeps the folder")
    victim = settings.home / "victim.txt"
    victim.write_text("mine")
    run = _killed(settings, "x")
    (run / FRESH_MARK).unlink()
    MARKS[kind](run / FRESH_MARK)
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / ".staging-0123abcd").write_bytes(b"a killed write")  # staging still goes
    assert read_mark(run) is None and not killed_fresh(run)
    before = {k: v for k, v in _tree(run).items() if ".staging-" not in k}
    _server_start(settings)
    _next_cli_run(settings)
    assert _tree(run) == before  # was (text marks): the sample and the snapshot removed
    assert victim.read_text() == "mine"


@REMOVERS
def test_a_folder_renamed_while_its_run_was_live_keeps_its_files(
    settings: Settings, remove: Callable[[Settings], dict[Path, str | None]]
) -> None:
    first = settings.outputs_dir / "x"
    fd = claim_run_dir(first, "aaaaaaaaaaaa")
    _write(first, "samples/step-000001-0.png", "loras/x-step-000001.safetensors")
    renamed = settings.outputs_dir / "y"
    first.rename(renamed)  # by its user, while the run is live
    second = claim_run_dir(first, "bbbbbbbbbbbb")  # the name is free: another fresh run takes it
    _write(first, "samples/step-000001-0.png")
    release_run_dir(fd)  # both runs are killed
    release_run_dir(second)
    kept = _tree(renamed)
    noted = remove(settings)
    assert _tree(renamed) == kept  # was: removed as a killed fresh run's (its user took it)
    assert not first.exists()  # the second run's: its own folder, killed fresh
    assert noted == {first: "bbbbbbbbbbbb"}  # the note goes to the second run's record only


def test_a_second_server_refused_the_home_removes_nothing(settings: Settings) -> None:
    """Two servers starting at once over one home: the one refused (HomeInUse) removes nothing;
    only the one that holds the home lock cleans (jobs/homelock.py)."""
    from fastapi.testclient import TestClient

    from lorastudio.api.app import create_app
    from lorastudio.errors import HomeInUse
    from lorastudio.jobs.homelock import HomeLock

    run = _killed(settings, "x")
    before = _tree(run)
    first = HomeLock.for_server(settings.home, port=None)  # the server that won the start
    try:
        with pytest.raises(HomeInUse), TestClient(create_app(settings)):
            pass
        assert _tree(run) == before
    finally:
        first.release()


@pytest.mark.parametrize("swapped", ["writer-folders", "run-folder"])
def test_a_folder_swapped_for_a_link_after_the_listing_removes_nothing_through_it(
    settings: Settings, victim: Path, swapped: str
) -> None:
    """A server start lists the leftovers, then removes them in a thread: a writer folder (or
    the run folder) swapped for a link to a folder holding the same names meanwhile is not
    followed (run_files.remove_entry). Was: the names were removed in the link's target."""
    run = _killed(settings, "x")
    _write(victim, "samples/step-000001-0.png", "loras/x-step-000001.safetensors")
    found = find_leftovers(settings)
    if swapped == "run-folder":
        run.rename(settings.outputs_dir / "x-moved")
        run.symlink_to(victim)
    else:
        for folder in ("samples", "loras"):
            (run / folder).rename(run / f"{folder}-moved")
            (run / folder).symlink_to(victim / folder)
    before = _tree(victim)
    remove_leftovers(found)
    assert _tree(victim) == before
