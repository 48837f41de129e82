"""`lorastudio du` (home_usage.py, session 34 home at scale audit): what takes the space of the
studio home, part by part, with the largest runs; a link is never followed (a run folder linking
a 1 GB file elsewhere does not count it), a hard-linked file counts once, and the parts add up to
the home's total."""

from __future__ import annotations

import os
from pathlib import Path

from typer.testing import CliRunner

from lorastudio.cli.app import _register, app
from lorastudio.home_usage import home_usage, largest_entries
from lorastudio.settings import Settings, get_settings


def _file(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    return path


def test_each_part_of_the_home_is_counted_once_and_links_are_not_followed(tmp_path: Path) -> None:
    settings = get_settings()
    home = settings.home
    big = _file(home / "outputs" / "big-run" / "big-run.safetensors", 400_000)
    _file(home / "outputs" / "small-run" / "small-run.safetensors", 10_000)
    os.link(big, home / "outputs" / "big-run" / "same-bytes.safetensors")  # a hard link: counted once
    outside = _file(tmp_path / "elsewhere.bin", 2_000_000)
    (home / "outputs" / "small-run" / "linked.bin").symlink_to(outside)  # the link itself, not its target
    _file(home / "gallery" / "000001_x.png", 50_000)
    _file(home / "cache" / "inductor" / "graph.bin", 120_000)
    _file(home / "generation-jobs" / "r1.json", 1_000)  # no part of its own: "(other)"

    parts = {u.path: u for u in home_usage(Settings(home=home))}
    outputs = parts[home / "outputs"]
    assert outputs.files == 3 and 410_000 <= outputs.bytes < 600_000  # the link counts as itself, a block
    assert parts[home / "gallery"].files == 1 and parts[home / "cache" / "inductor"].files == 1
    assert parts[home].files == 1  # the rest of the home: the generation record
    assert list(parts.values()) == sorted(parts.values(), key=lambda u: u.bytes, reverse=True)
    assert [u.path.name for u in largest_entries(home / "outputs", 1)] == ["big-run"]

    _register()
    shown = CliRunner().invoke(app, ["du", "--top", "1"])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert lines[0] == f"home: {home}" and lines[1].startswith("part\tfiles\tsize")
    assert lines[2].startswith("outputs\t3\t") and "delete a run" in lines[2]
    assert "cache/inductor\t1\t" in shown.output and "(other)\t1\t" in shown.output
    assert (
        "largest runs:" in shown.output and "big-run\t" in shown.output and "small-run\t" not in shown.output
    )


def test_a_folder_that_cannot_be_read_is_named_not_silently_left_out(monkeypatch) -> None:
    from lorastudio import home_usage as usage

    home = get_settings().home
    _file(home / "outputs" / "run-a" / "run-a.safetensors", 1_000)
    locked = home / "outputs" / "run-b"
    _file(locked / "run-b.safetensors", 1_000)
    real = os.scandir

    def scandir(path: os.PathLike[str] | str) -> object:
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(usage.os, "scandir", scandir)
    _register()
    shown = CliRunner().invoke(app, ["du"])
    assert shown.exit_code == 0, shown.output
    assert f"not counted (cannot be read): {locked}" in shown.output
    assert "outputs\t1\t" in shown.output  # run-a's file only


def test_a_linked_home_and_a_linked_part_are_counted(tmp_path: Path) -> None:
    """RELIABILITY 1241: LORASTUDIO_HOME naming a link to a folder on a larger disk (and `outputs`
    linked to another disk) was counted as the link itself: "(other) 1 file 0 B", the home's own
    records, store and timings left out. The home and each part are followed; links below them
    are still not."""
    real = tmp_path / "disk" / "studio"
    _file(real / "generation-jobs" / "r1.json", 30_000)
    _file(tmp_path / "disk2" / "outputs" / "run" / "run.safetensors", 40_000)
    (real / "outputs").symlink_to(tmp_path / "disk2" / "outputs")
    (tmp_path / "home").symlink_to(real)
    parts = {u.path: u for u in home_usage(Settings(home=tmp_path / "home"))}
    assert parts[tmp_path / "home"].files == 1 and parts[tmp_path / "home"].bytes >= 30_000
    assert parts[tmp_path / "home" / "outputs"].files == 1


def test_only_files_of_several_links_are_remembered(tmp_path: Path) -> None:
    """RELIABILITY 1245: every file's (device, inode) was kept to count hard links once, beside a
    folder's whole listing: `du` took 287 MB more for a dataset folder of 300,000 images (1e6:
    ~1 GB). Only a file of more than one link can be met twice: only those are remembered (and a
    folder is read one entry at a time)."""
    from lorastudio.home_usage import _walk

    for i in range(3):
        _file(tmp_path / "set" / f"{i}.png", 100)
    os.link(tmp_path / "set" / "0.png", tmp_path / "set" / "again.png")
    seen: set[tuple[int, int]] = set()
    assert _walk(tmp_path / "set", seen, [])[0] == 3  # the hard link once
    assert len(seen) == 2  # the folder and the file of two links


def test_a_part_inside_another_is_counted_once(tmp_path: Path) -> None:
    """LORASTUDIO_CACHE_DIR inside `outputs`: its files once, in whichever part came first."""
    home = tmp_path / "home"
    _file(home / "outputs" / "cache" / "shard.bin", 50_000)
    parts = home_usage(Settings(home=home, cache_dir=home / "outputs" / "cache"))
    assert sum(u.files for u in parts) == 1


def test_a_home_that_cannot_be_reached_is_named(tmp_path: Path) -> None:
    """RELIABILITY 1247: LORASTUDIO_HOME naming a link loop (or under a folder not searchable) was
    "total: 0 files, 0 B" and nothing else; the home is now named as not counted. A run folder
    that is a link loop is named too (it was the link itself, 1 file)."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    unread: list[Path] = []
    assert home_usage(Settings(home=tmp_path / "a"), unread) == [] and unread == [tmp_path / "a"]
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "loop").symlink_to(tmp_path / "a")
    unread = []
    assert [u.files for u in largest_entries(tmp_path / "runs", 5, unread)] == [0]
    assert unread == [tmp_path / "runs" / "loop"]
