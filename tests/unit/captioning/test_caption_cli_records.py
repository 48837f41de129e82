"""A CLI `lorastudio datasets caption` is recorded like a server's caption job
(jobs/caption_records.py): a real CLI process killed with kill -9 mid-job reads "interrupted"
(naming the CLI process) with what it had done, and a server on the home lists it; the next CLI
run's record is completed, listed first. A CLI and a server never write records at once: the
home lock refuses the CLI while a server owns the home (jobs/homelock.py)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from PIL import Image
from typer.testing import CliRunner

from forked_cli import start_cli
from lorastudio.jobs.caption_records import list_records, records_dir
from lorastudio.jobs.homelock import HomeLock
from lorastudio.settings import get_settings
from polling import until


def test_a_killed_cli_caption_reads_interrupted_and_the_next_is_recorded(
    tiny_vlm: Path, tmp_path: Path
) -> None:
    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    settings = get_settings().ensure_dirs()
    folder = settings.datasets_dir / "cards"
    folder.mkdir()
    for i in range(3):
        Image.new("RGB", (40, 32), (60 * i, 80, 200)).save(folder / f"card{i}.png")
    args = ["datasets", "caption", "cards", "--model", str(tiny_vlm), "--device", "cpu", "--max-tokens", "4"]
    log = tmp_path / "first-caption.log"
    first = start_cli(log, *args)  # a real process, forked from this one (tests/forked_cli.py)
    try:
        until(lambda: list(records_dir(settings.home).glob("*.json")), 120, "the CLI job's record")
        os.kill(first.pid, signal.SIGSTOP)  # mid-job (before or after its plan: either is a record)
        (record,) = records_dir(settings.home).glob("*.json")
        left = json.loads(record.read_text(encoding="utf-8"))
        assert (left["job"]["status"], left["owner"]["pid"], left["owner"]["source"]) == (
            "running",
            first.pid,
            "cli",
        )
        assert list_records(settings.home)[0]["status"] == "running"  # its process lives (stopped)
    finally:
        first.kill()
        first.join(30)
    (killed,) = list_records(settings.home)
    assert killed["status"] == "interrupted", killed
    assert (
        f"the `lorastudio datasets caption` process (pid {first.pid}) ended without recording"
        in killed["error"]
    )
    assert f"when last recorded {left['job']['done']}" in killed["error"]
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    newest, older = list_records(settings.home)
    assert older["id"] == killed["id"] and older["status"] == "interrupted"
    assert (newest["status"], newest["dataset"], newest["device"], newest["failed"]) == (
        "completed",
        "cards",
        "cpu",
        0,
    )
    assert newest["captioned"] + newest["skipped"] == 3 and newest["total"] == newest["captioned"]
    assert newest["finished_at"] and len(newest["preview"]) == newest["captioned"]


def test_a_cli_caption_beside_a_server_is_refused_and_records_nothing(tiny_vlm: Path) -> None:
    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    settings = get_settings().ensure_dirs()
    (settings.datasets_dir / "cards").mkdir()
    Image.new("RGB", (40, 32), (60, 80, 200)).save(settings.datasets_dir / "cards" / "card0.png")
    with HomeLock.for_server(settings.home, 8765):
        out = CliRunner().invoke(
            app, ["datasets", "caption", "cards", "--model", str(tiny_vlm), "--device", "cpu"]
        )
    assert out.exit_code == 1 and "owns the studio home" in out.output, out.output
    assert list_records(settings.home) == [] and not records_dir(settings.home).exists()
