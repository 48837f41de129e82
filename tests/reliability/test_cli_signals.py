"""Ctrl-C and SIGTERM outside the windows where a command handled them (session 25 CLI audit).

Each case runs the real CLI (`cli.app.main`) in a child process that sends itself the signal
from a real step of the command (the commands' registration, a file copy of `datasets import`,
the start of `train` before the run's own handler is installed), so the signal arrives where a
user's would, without timing: a Ctrl-C while the commands' modules imported printed a Python
traceback of the import it cut; a SIGTERM ended Python before any `finally`, leaving
`datasets import`'s staging folder under datasets/.uploads; a single Ctrl-C (or a SIGTERM) of
`train` before training began was reported as "aborted (Ctrl-C twice)" (or killed it outright).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import lorastudio

SRC = str(Path(lorastudio.__file__).resolve().parents[1])

# The child: Ctrl-C is Python's KeyboardInterrupt in it (pytest may run as a background job whose
# SIGINT is ignored, and inherited). HOOK (module, function, after how many calls) is wrapped to
# send SIGNAL to this process before its call, then run as usual.
CHILD = """
import importlib, os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
module, name, after, sig = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
target = importlib.import_module(module)
real = getattr(target, name)
calls = [0]

def hooked(*args, **kwargs):
    calls[0] += 1
    if calls[0] == after:
        os.kill(os.getpid(), sig)
    return real(*args, **kwargs)

setattr(target, name, hooked)
from lorastudio.cli.app import main
sys.argv = ["lorastudio", *sys.argv[5:]]
main()
"""


def _run(hook: tuple[str, str, int], sig: signal.Signals, *args: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `lorastudio ARGS` whose HOOK sends itself `sig`."""
    module, name, after = hook
    env = {**os.environ, "PYTHONPATH": SRC}
    child = subprocess.run(
        [sys.executable, "-c", CHILD, module, name, str(after), str(int(sig)), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return child.returncode, child.stdout, child.stderr


def test_ctrl_c_while_the_commands_import_exits_130_without_a_traceback() -> None:
    code, out, err = _run(("lorastudio.cli.info_cmd", "register", 1), signal.SIGINT, "paths")
    assert code == 130, (code, out, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_mid_import_leaves_no_staging_folder(sig: signal.Signals, sample_dataset: Path) -> None:
    """`datasets import` copies into datasets/.uploads/<id> and renames it into place; a signal
    mid-copy removes that folder (SIGTERM: was kept, 12 MB a killed 1,500-image import)."""
    from lorastudio.settings import get_settings

    code, out, err = _run(
        ("shutil", "copyfileobj", 3), sig, "datasets", "import", str(sample_dataset), "--name", "cut"
    )
    assert code == (143 if sig == signal.SIGTERM else 130), (code, out, err)
    assert "Traceback" not in err, err
    datasets = get_settings().datasets_dir
    assert not (datasets / "cut").exists()
    staging = datasets / ".uploads"
    assert not staging.exists() or list(staging.iterdir()) == [], list(staging.iterdir())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_one_signal_before_training_began_is_not_called_a_double_ctrl_c(
    sig: signal.Signals, tmp_path: Path
) -> None:
    """One Ctrl-C or SIGTERM while `train` starts (here: as it clears killed runs' leftovers,
    before its run's stop handler exists) exits 130, the documented status of a stopped run,
    saying it came before training began; a SIGTERM there ended Python at once (status -15)."""
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"family": "flux", "base_model": "none", "data_dir": "none", "steps": 2}))
    hook = ("lorastudio.cli.train_cmd", "_remove_abandoned_runs", 1)
    code, out, err = _run(hook, sig, "train", str(config), "--device", "cpu")
    assert code == 130, (code, out, err)
    by = "SIGTERM" if sig == signal.SIGTERM else "Ctrl-C"
    assert f"interrupted by {by} before training began" in err and "nothing saved" in out, (out, err)
    assert "twice" not in err and "second" not in err and "Traceback" not in err, err
