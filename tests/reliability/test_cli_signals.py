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
import signal
from pathlib import Path

import pytest

from signalled_cli import run_signalled


def _run(hook: tuple[str, str, int], sig: signal.Signals, *args: str, times: int = 1) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `lorastudio ARGS` whose HOOK sends itself `sig` `times` times."""
    child = run_signalled(hook, sig, *args, times=times)
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
        ("lorastudio.data.uploads", "copy_stream", 3),
        sig,
        "datasets",
        "import",
        str(sample_dataset),
        "--name",
        "cut",
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


@pytest.mark.slow
def test_two_ctrl_c_in_a_checkpoint_write_record_the_run_interrupted(
    settings, shapes: Path, flux_config, tmp_path: Path
) -> None:
    """A second Ctrl-C inside train() (here: as the first checkpoint is written) aborts the run;
    its record said "failed: training interrupted" (the engine's Error event of it), now
    "interrupted" with the reason; nothing staged is left under outputs/."""
    from lorastudio.jobs.store import RunStore

    config = tmp_path / "run.json"
    config.write_text(json.dumps(flux_config(output_name="cut", save_every=2)))
    hook = ("lorastudio.training.resume.checkpoint", "write_checkpoint_folder", 1)
    code, out, err = _run(hook, signal.SIGINT, "train", str(config), "--device", "cpu", times=2)
    assert code == 130 and "aborted by a second Ctrl-C" in err and "Traceback" not in err, (out, err)
    [run] = RunStore.open(settings.db_path, recover=False).list_runs()
    assert (run["status"], run["error"]) == ("interrupted", "aborted by a second Ctrl-C or SIGTERM"), run
    left = [p for p in settings.outputs_dir.rglob("*") if p.name.startswith(".")]
    assert left == [], left
