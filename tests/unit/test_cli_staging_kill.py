"""A kill -9 of `lorastudio lora convert|merge|resize` or `generate --out` (session 28 chaos
audit, Known problems): its staging file `.NAME.<hex>.staging` / `.partial` beside the output in
the user's folder stayed for ever (a SIGTERM or Ctrl-C removes it, fix 76). Now the staging name
carries the writer's pid (lorastudio/staged_files.py) and the next such command writing into that
folder removes the staging files of its kind whose writer is gone: never a live process's, never
a link, never another kind's; an older name without a pid only once a day old (fix 824)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cli_runner import run_cli
from lora_file import write_flux_lora
from lorastudio.staged_files import IMAGE_PARTIAL, LORA_STAGING, staging_path

# `lorastudio ARGS...` (argv[1:]), SIGKILLed (no cleanup) once its output is staged, at the publish.
_KILLED_AT_PUBLISH = """
import os, signal, sys
import lorastudio.user_paths as user_paths
def publish(staged, *args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
user_paths.publish_file = publish
import lorastudio.cli.generate_cmd, lorastudio.lora.files
lorastudio.cli.generate_cmd.publish_file = lorastudio.lora.files.publish_file = publish
from lorastudio.cli.app import main
sys.argv = ["lorastudio", *sys.argv[1:]]
main()
"""


def _killed(folder: Path, *args: str) -> Path:
    """Run `lorastudio ARGS` (writing into `folder`) killed at its publish: its staging file."""
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_AT_PUBLISH, *args], capture_output=True, timeout=300
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    staged = [p for p in folder.iterdir() if p.name.startswith(".")]
    assert len(staged) == 1, staged
    return staged[0]


def _kept(folder: Path, kind: str, live_pid: int) -> dict[str, Path]:
    """Entries of `folder` that a later command of `kind` must keep beside a killed one's staging."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("os.getpid", lambda: live_pid)
        live = staging_path(folder / "busy.out", kind)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    gone = int(dead.stdout)
    link = folder / f".linked.out.{gone}-abcdef.{kind}"
    link.symlink_to(folder.parent / "elsewhere.bin")
    other = IMAGE_PARTIAL if kind == LORA_STAGING else LORA_STAGING
    kept = {
        "live": live,  # a running writer's
        "older": folder / f".old.out.1234abcd.{kind}",  # no pid, written an hour ago: may be live
        "other kind": folder / f".x.out.{gone}-abcdef.{other}",
    }
    for path in kept.values():
        path.write_bytes(b"x")
    hour_ago = time.time() - 3600
    os.utime(kept["older"], (hour_ago, hour_ago))
    return {**kept, "link": link}


def _aged(folder: Path, kind: str) -> Path:
    """An older lorastudio's staging file of `kind` (no pid) last written 25 hours ago: a killed
    writer's for certain (staged_files.older_stale), which the next command removes."""
    aged = folder / f".aged.out.5678abcd.{kind}"
    aged.write_bytes(b"x")
    day_ago = time.time() - 25 * 3600
    os.utime(aged, (day_ago, day_ago))
    return aged


def _next_command_removes(staged: Path, kind: str, rerun: Callable[[], None]) -> None:
    """`rerun` (a command of `kind` into staged's folder) removes `staged` and nothing else."""
    folder = staged.parent
    (folder.parent / "elsewhere.bin").write_bytes(b"not the command's")
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        kept = _kept(folder, kind, live.pid)
        aged = _aged(folder, kind)
        rerun()
        assert not staged.exists(), sorted(folder.iterdir())
        assert not aged.exists(), sorted(folder.iterdir())
        assert all(p.is_symlink() or p.exists() for p in kept.values()), sorted(folder.iterdir())
        assert (folder.parent / "elsewhere.bin").read_bytes() == b"not the command's"
    finally:
        live.communicate(b"")


def test_a_killed_lora_convert_leaves_what_the_next_one_removes(capsys, monkeypatch, tmp_path: Path) -> None:
    src = write_flux_lora(tmp_path / "in.safetensors")
    folder = tmp_path / "outs"
    folder.mkdir()
    staged = _killed(folder, "lora", "convert", str(src), str(folder / "a.safetensors"), "--to", "kohya")
    assert staged.name.endswith(f".{LORA_STAGING}"), staged
    assert not (folder / "a.safetensors").exists()

    def rerun() -> None:
        got, text = run_cli(
            capsys, monkeypatch, "lora", "convert", str(src), str(folder / "b.safetensors"), "--to", "kohya"
        )
        assert got == 0, text

    _next_command_removes(staged, LORA_STAGING, rerun)
    assert (folder / "b.safetensors").is_file()


@pytest.mark.slow  # ~11 s on the 2-core host: a tiny FLUX.1 pipeline loads twice
def test_a_killed_generate_out_leaves_what_the_next_one_removes(
    capsys, monkeypatch, tmp_path: Path, tiny_model
) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    common = ["generate", "--base", str(tiny_model("flux")), "--prompt", "a red circle", "--steps", "1"]
    common += ["--width", "32", "--height", "32", "--device", "cpu"]
    staged = _killed(folder, *common, "--out", str(folder / "a.png"))
    assert staged.name.endswith(f".{IMAGE_PARTIAL}"), staged
    assert not (folder / "a.png").exists()

    def rerun() -> None:
        got, text = run_cli(capsys, monkeypatch, *common, "--out", str(folder / "b.png"))
        assert got == 0, text

    _next_command_removes(staged, IMAGE_PARTIAL, rerun)
    assert (folder / "b.png").stat().st_size > 0
