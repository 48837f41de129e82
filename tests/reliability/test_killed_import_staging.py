"""The staging a SIGKILLed import leaves under datasets/.uploads (RELIABILITY 591).

A real `lorastudio datasets import --kohya` runs in a child process that pauses inside its second
folder's upload (a file copy), with its whole staging made: the kohya staging folder holding the
first dataset and the second folder's upload staging. While it lives, neither the next CLI
command's clean-up nor a server start's removes that staging; once it is SIGKILLed, the next
`datasets` command (or `train`) removes it, and the same import runs again. A staging folder of
no owner (an older lorastudio's, or one on a file system without flock) is left to a server start.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from PIL import Image
from typer.testing import CliRunner

import lorastudio
from lorastudio.settings import Settings, get_settings
from polling import until

SRC = str(Path(lorastudio.__file__).resolve().parents[1])

# The child: the real CLI, whose AFTER-th copy_stream (an upload's file copy) writes READY and
# then waits to be killed (it is never let go).
CHILD = """
import sys, time
import lorastudio.data.uploads as uploads
ready, after = sys.argv[1], int(sys.argv[2])
real, calls = uploads.copy_stream, [0]

def paused(*args, **kwargs):
    calls[0] += 1
    if calls[0] == after:
        open(ready, "w").close()
        while True:
            time.sleep(1)
    return real(*args, **kwargs)

uploads.copy_stream = paused
from lorastudio.cli.app import main
sys.argv = ["lorastudio", *sys.argv[3:]]
main()
"""


@pytest.fixture(scope="session")
def cli() -> typer.Typer:
    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    return app


@pytest.fixture
def paused_import(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], list[str]]]:
    """A kohya import of two folders paused in its second folder's first file copy (its staging
    made), and its arguments; killed at the end whatever the test did."""
    src = tmp_path / "img"
    for folder in ("1_a", "2_b"):
        (src / folder).mkdir(parents=True)
        Image.new("RGB", (32, 32), "red").save(src / folder / "a.png")
    args = ["datasets", "import", str(src), "--name", "k", "--kohya"]
    ready = tmp_path / "ready"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(ready), "3", *args],
        env={**os.environ, "PYTHONPATH": SRC},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        until(lambda: ready.exists() or child.poll() is not None, 120, "paused import")
        assert child.poll() is None, "the import ended instead of pausing"
        yield child, args
    finally:
        child.kill()
        child.wait()


def _staging(settings: Settings) -> set[str]:
    root = settings.datasets_dir / ".uploads"
    return {p.name for p in root.iterdir()} if root.exists() else set()


def test_a_killed_imports_staging_goes_at_the_next_command_and_a_live_ones_never(
    cli: typer.Typer, paused_import: tuple[subprocess.Popen[bytes], list[str]]
) -> None:
    """RELIABILITY 591: a SIGKILLed import's staging stayed until the next `lorastudio serve`, and
    that server start removed a live CLI import's staging as well (the CLI takes no home lock).
    Fails on the old code: the server start's list held the live import's staging."""
    from lorastudio.jobs.leftovers import find_leftovers

    child, args = paused_import
    settings = get_settings()
    live = _staging(settings)
    old = settings.datasets_dir / ".uploads" / ("0" * 32)  # of no owner (an older lorastudio's)
    old.mkdir()
    (old / "a.png").write_bytes(b"x")
    kohya = [n for n in live if n.startswith("kohya-") and not n.endswith(".owner")]
    assert len(kohya) == 1 and (settings.datasets_dir / ".uploads" / kohya[0] / "k-1_a").is_dir(), live
    assert len([n for n in live if not n.endswith(".owner")]) == 2, live  # and the upload's staging
    assert find_leftovers(settings) == [old]  # a server start keeps a live import's staging
    listed = CliRunner().invoke(cli, ["datasets", "list"])
    assert listed.exit_code == 0, listed.output
    assert _staging(settings) == {*live, old.name}  # and so does the next command

    child.send_signal(signal.SIGKILL)
    child.wait()
    assert _staging(settings) == {*live, old.name}  # left by the kill
    listed = CliRunner().invoke(cli, ["datasets", "list"])
    assert listed.exit_code == 0, listed.output
    assert _staging(settings) == {old.name}, _staging(settings)  # one of no owner: a server start's
    assert "removed what a killed import or upload left" in listed.output
    shutil.rmtree(old)
    again = CliRunner().invoke(cli, args)  # the same import runs again, whole
    assert again.exit_code == 0, again.output
    assert {p.name for p in settings.datasets_dir.iterdir() if not p.name.startswith(".")} == {
        "k-1_a",
        "k-2_b",
    }
    assert _staging(settings) == set()  # its owner files with it
