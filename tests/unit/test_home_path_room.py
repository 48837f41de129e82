"""A studio home (or LORASTUDIO_CACHE_DIR) too deep for the studio's own files below it under the
file system's PATH_MAX is refused at the start of every command and `serve`, naming the setting
and the limit. Before, a home 4,039 bytes deep served and preflighted, and its run failed at its
first cache write ("File name too long: <home>/cache/decoded/.<hash>.json.<pid>-<hex>.tmp")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.settings_refusal import refused_setting

from lorastudio.settings import BELOW_HOME_BYTES, Settings, path_max


def _deep(root: Path, total: int) -> Path:
    """A path below `root` of exactly `total` bytes (components of at most 255 bytes)."""
    path = str(root)
    while len(os.fsencode(path)) < total:
        room = total - len(os.fsencode(path)) - 1
        path += "/" + "d" * min(255, max(room, 1))
    assert len(os.fsencode(path)) == total
    return Path(path)


def test_a_home_too_deep_is_refused_naming_the_setting_and_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = path_max(tmp_path)
    most = limit - 1 - BELOW_HOME_BYTES
    assert Settings(home=_deep(tmp_path, most)).home == _deep(tmp_path, most)  # the deepest allowed
    problem = refused_setting(monkeypatch, "LORASTUDIO_HOME", str(_deep(tmp_path, most + 1)))
    assert problem.field == "LORASTUDIO_HOME"
    assert (
        f"is {most + 1:,} bytes long" in problem.message
        and f"(PATH_MAX) is {limit:,} bytes" in problem.message
    )
    assert problem.message.endswith(f"give a folder of at most {most:,} bytes")
    with pytest.raises(ValueError, match="PATH_MAX"):
        Settings(home=tmp_path, cache_dir=_deep(tmp_path, most + 1))


def test_serve_on_a_home_too_deep_exits_before_it_listens(tmp_path: Path) -> None:
    home = _deep(tmp_path, path_max(tmp_path) - 1)
    env = {**os.environ, "LORASTUDIO_HOME": str(home), "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-m", "lorastudio.cli", "serve", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done
    assert done.stderr.startswith("error: invalid configuration (1 problem(s)):\n  - LORASTUDIO_HOME: ")
    assert "PATH_MAX" in done.stderr and not home.exists()
