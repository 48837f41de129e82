"""The added-folders list written by two processes of one home at once (RELIABILITY 777): a CLI
`lorastudio models add` beside the server's add (the Models page). Each read-modify-write holds
an flock other processes honour, so neither add is lost (a threading lock kept only the server's
own threads apart: the later writer wrote the list it had read, without the other's folder).
The interleaving is forced: the other process starts its add while this one's write is due."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lorastudio.basemodels import added
from lorastudio.settings import Settings

SRC = str(Path(__file__).parents[3] / "src")
PROBE = (
    "import fcntl, os, sys\n"
    "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
    "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n    print('free')\n"
    "except BlockingIOError:\n    print('held')\n"
)


def test_a_cli_add_beside_the_servers_add_loses_neither(
    studio_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(home=studio_home).ensure_dirs()
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    mine.mkdir(), theirs.mkdir()
    env = {**os.environ, "PYTHONPATH": SRC, "LORASTUDIO_HOME": str(studio_home)}
    seen: list[str] = []
    other: list[subprocess.Popen[str]] = []
    write = added._write

    def write_with_another_add(*args: object) -> None:  # this add read the list and writes it now
        probe = [sys.executable, "-c", PROBE, str(studio_home / ".added_models.lock")]
        seen.append(subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip())
        cli = [sys.executable, "-m", "lorastudio.cli", "models", "add", str(theirs)]
        other.append(
            subprocess.Popen(cli, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        )
        write(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(added, "_write", write_with_another_add)
    added.add_folder(settings, str(mine))
    out, _ = other[0].communicate(timeout=120)

    assert seen == ["held"]  # another process could not take the list meanwhile
    assert other[0].returncode == 0, out
    assert added.added_folders(settings) == [mine.resolve(), theirs.resolve()]
