"""The console program under a locale whose encoding is not UTF-8 runs in Python's UTF-8 mode
(cli/utf8_mode.py, RELIABILITY 1028): its file names are the UTF-8 the studio writes everywhere
else. The C locale with PYTHONUTF8=0 is the non-UTF-8 locale every host has (ASCII)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_the_console_program_reads_file_names_as_utf8_under_an_ascii_locale(tmp_path: Path) -> None:
    """Before: the home `hé猫` was held as lone surrogates and printed `\\udcc3...`; under
    LC_ALL=en_US.ISO-8859-1 `serve` answered an upload named `bild_猫.png` with a 500."""
    home = tmp_path / "hé猫"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": os.pathsep.join(sys.path),
        "LORASTUDIO_HOME": str(home),
        "LC_ALL": "C",
        "PYTHONCOERCECLOCALE": "0",
        "PYTHONUTF8": "0",
    }
    done = subprocess.run(
        [sys.executable, "-m", "lorastudio.cli", "paths"], env=env, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done
    assert f"{home}/datasets".encode() in done.stdout, done.stdout
    assert b"\\udc" not in done.stdout and not done.stderr, done
