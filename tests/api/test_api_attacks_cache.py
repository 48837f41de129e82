"""Attacks on `GET/DELETE /api/cache` and `lorastudio cache ls|clear`: links and foreign files
planted in the cache folder (or a LORASTUDIO_CACHE_DIR pointed at a folder of other files) are
never listed, followed or removed; a clear that would remove what the cache did not write is
refused (409 / exit 1) naming it, removing nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from lorastudio.data.disk_cache import cache_root
from lorastudio.settings import Settings

MODEL, OTHER = "d" * 20, "e" * 20


def _shard(folder: Path, key: str = "ab" * 32) -> Path:
    path = folder / key[:2] / f"{key}.safetensors"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * 100)
    return path


def test_a_linked_kind_folder_is_not_listed_or_cleared(
    client: TestClient, settings: Settings, tmp_path: Path
) -> None:
    """`<cache>/latents` a link to a folder of the user's: the old clear renamed and deleted
    every folder in it."""
    outside = tmp_path / "precious"
    kept = _shard(outside / MODEL)
    (outside / "photos").mkdir()
    root = cache_root(settings)
    root.mkdir(parents=True)
    (root / "latents").symlink_to(outside, target_is_directory=True)
    _shard(root / "text" / MODEL)
    assert [(e["kind"], e["model"]) for e in client.get("/api/cache").json()["entries"]] == [("text", MODEL)]
    cleared = client.delete("/api/cache")
    assert cleared.status_code == 200 and cleared.json()["freed_bytes"] == 100
    assert kept.is_file() and (outside / "photos").is_dir()


def test_a_linked_model_folder_is_skipped_not_a_500(
    client: TestClient, settings: Settings, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere"
    kept = _shard(outside)
    (cache_root(settings) / "latents").mkdir(parents=True)
    (cache_root(settings) / "latents" / MODEL).symlink_to(outside, target_is_directory=True)
    assert client.get("/api/cache").json()["entries"] == []
    assert client.delete("/api/cache").status_code == 200 and kept.is_file()
    assert client.delete("/api/cache", params={"model": MODEL}).status_code == 404


@pytest.mark.parametrize("plant", ["file", "link", "folder"])
def test_a_model_folder_with_foreign_entries_is_refused_whole(
    client: TestClient, settings: Settings, tmp_path: Path, plant: str
) -> None:
    root = cache_root(settings)
    ours = _shard(root / "latents" / MODEL)
    other = _shard(root / "text" / OTHER)
    foreign = root / "latents" / MODEL / ("ab" if plant != "folder" else "zz") / "notes.txt"
    if plant == "link":
        foreign = foreign.with_name("cd" * 32 + ".safetensors")
        foreign.symlink_to(tmp_path)
    else:
        foreign.parent.mkdir(exist_ok=True)
        foreign.write_text("mine")
    refused = client.delete("/api/cache")
    assert refused.status_code == 409, refused.text
    body = refused.json()
    assert body["error"] == "CacheError" and any(
        str(foreign) in p or str(foreign.parent) in p for p in body["problems"]
    )
    assert ours.is_file() and other.is_file() and foreign.exists()  # nothing removed
    assert client.delete("/api/cache", params={"model": OTHER}).status_code == 200 and not other.exists()


def test_cache_clear_in_a_foreign_cache_dir_removes_nothing_of_its(
    cli: typer.Typer, tmp_path: Path, monkeypatch
) -> None:
    """LORASTUDIO_CACHE_DIR pointed at a folder holding `text/notes/` and `latents/<20 hex>/`
    of other files: `cache ls` lists no entry of theirs, `cache clear -y` refuses and keeps all."""
    from lorastudio.settings import get_settings

    odd = tmp_path / "mine"
    (odd / "text" / "notes").mkdir(parents=True)
    (odd / "text" / "notes" / "todo.txt").write_text("x")
    (odd / "latents" / MODEL).mkdir(parents=True)
    (odd / "latents" / MODEL / "report.pdf").write_text("y")
    monkeypatch.setenv("LORASTUDIO_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LORASTUDIO_CACHE_DIR", str(odd))
    get_settings.cache_clear()
    try:
        listed = CliRunner().invoke(cli, ["cache", "ls"])
        assert listed.exit_code == 0 and "notes" not in listed.output
        cleared = CliRunner().invoke(cli, ["cache", "clear", "-y"])
        assert cleared.exit_code != 0 and "report.pdf" in cleared.output
        assert (odd / "text" / "notes" / "todo.txt").is_file() and (
            odd / "latents" / MODEL / "report.pdf"
        ).is_file()
    finally:
        get_settings.cache_clear()


def test_a_clear_while_another_process_reads_the_cache_is_a_409(
    client: TestClient, settings: Settings
) -> None:
    """A run of another home sharing this cache folder (LORASTUDIO_CACHE_DIR) holds its readers
    lock: DELETE /api/cache is refused naming its pid until it ends."""
    root = cache_root(settings)
    shard = _shard(root / "latents" / MODEL)
    code = (
        "import sys, time, pathlib; from lorastudio.data.cache_io import hold_readers; "
        f"hold_readers(pathlib.Path({str(root)!r})); print('held', flush=True); time.sleep(60)"
    )
    reader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "held"
        refused = client.delete("/api/cache")
        assert refused.status_code == 409 and f"pid {reader.pid}" in refused.text and shard.is_file()
    finally:
        reader.kill()
        reader.wait()
    assert client.delete("/api/cache").status_code == 200 and not shard.exists()


@pytest.mark.parametrize("value", ["", "   "])
def test_a_blank_cache_dir_is_the_default_not_the_current_folder(
    cli: typer.Typer, tmp_path: Path, monkeypatch, value: str
) -> None:
    """`export LORASTUDIO_CACHE_DIR=` made the cache (and `cache clear`) the current folder."""
    from lorastudio.settings import get_settings

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LORASTUDIO_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LORASTUDIO_CACHE_DIR", value)
    get_settings.cache_clear()
    try:
        assert cache_root(get_settings()) == tmp_path / "home" / "cache" / "encoded"
        assert (
            f"cache: {tmp_path / 'home' / 'cache' / 'encoded'}"
            in CliRunner().invoke(cli, ["cache", "ls"]).output
        )
    finally:
        get_settings.cache_clear()


def test_a_relative_or_tilde_cache_dir_is_made_absolute_once(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert Settings(cache_dir="rel/c").cache_dir == tmp_path / "rel" / "c"
    assert Settings(cache_dir="~/c").cache_dir == tmp_path / "user" / "c"  # not a folder named "~"
    assert Settings(home="~/h").home == tmp_path / "user" / "h"


def test_a_clear_beside_a_crashed_clears_leftover_of_the_same_pid(
    client: TestClient, settings: Settings
) -> None:
    """A killed clear's `.<model>.removing.<pid>` (pid since reused by this server): the rename
    aside onto it failed (ENOTEMPTY: a 500)."""
    root = cache_root(settings)
    shard = _shard(root / "latents" / MODEL)
    _shard(root / "latents" / f".{MODEL}.removing.{os.getpid()}")
    cleared = client.delete("/api/cache")
    assert cleared.status_code == 200 and not shard.exists()
