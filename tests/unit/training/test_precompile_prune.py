"""training/speed/precompile_prune.py (RELIABILITY 1772): the saved Dynamo graphs of a key no run used
for KEEP_DAYS days are removed, never those a live process holds; a kept key loses a killed
saver's staging file; `lorastudio cache prune` says what it removed. Torch-free, in-process."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lorastudio.training.speed import precompile_prune
from lorastudio.training.speed.precompile_prune import IN_USE, KEEP_DAYS, mark_in_use, prune_keys

OLD = time.time() - (KEEP_DAYS + 5) * 86400


def _key(root: Path, name: str, when: float) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    graph = folder / "FluxTransformerBlock-0123.bin"
    graph.write_bytes(b"g" * 1000)
    for path in (graph, folder):
        os.utime(path, (when, when))
    return folder


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", ""])  # noqa: S603 - a pid that runs no more
    proc.wait()
    return proc.pid


def test_old_keys_go_recent_and_held_ones_stay_and_lose_killed_staging(tmp_path: Path) -> None:
    root = tmp_path / "inductor" / precompile_prune.FOLDER
    old = _key(root, "old", OLD)
    recent = _key(root, "recent", time.time())
    staged = recent / f".FluxTransformerBlock-0123.bin.{_dead_pid()}-abcdef.tmp"
    staged.write_bytes(b"part")
    held = _key(root, "held", OLD)
    (held / IN_USE).touch()
    os.utime(held / IN_USE, (OLD, OLD))
    fd = os.open(held / IN_USE, os.O_RDWR)  # another process's shared lock (another open file)
    fcntl.flock(fd, fcntl.LOCK_SH)
    try:
        done = prune_keys(root)
    finally:
        os.close(fd)
    assert [r.path for r in done.removed] == [old] and done.removed[0].bytes == 1000
    assert not old.exists() and (recent / "FluxTransformerBlock-0123.bin").is_file()
    assert done.in_use == [held] and (held / "FluxTransformerBlock-0123.bin").is_file()
    assert done.staging == [staged] and not staged.exists()
    assert sorted(p.name for p in root.iterdir()) == ["held", "recent"]  # nothing set aside stays


def test_a_key_marked_in_use_counts_as_used_now(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precompile_prune, "_HELD", {})
    root = tmp_path / precompile_prune.FOLDER
    old = _key(root, "old", OLD)
    mark_in_use(old)  # a run loads from it: its time is now, and this process holds it
    try:
        assert prune_keys(root).removed == [] and old.is_dir()
        assert prune_keys(root, now=time.time() + (KEEP_DAYS + 1) * 86400).removed == []  # held
    finally:
        os.close(precompile_prune._HELD.pop(str(old)))


def test_cache_prune_says_which_saved_graphs_it_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from lorastudio.cli.app import _register, app

    monkeypatch.setenv("LORASTUDIO_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    old = _key(tmp_path / "home" / "cache" / "inductor" / precompile_prune.FOLDER, "k0ld", OLD)
    _register()
    out = CliRunner().invoke(app, ["cache", "prune"])
    assert out.exit_code == 0, out.output
    assert f"removed saved graphs {old}" in out.output and not old.exists()
