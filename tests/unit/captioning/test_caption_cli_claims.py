"""Two `lorastudio datasets caption` runs on one dataset (jobs/dataset_claims.py): the second is
refused (exit 3) naming the dataset and the first (a real CLI process, frozen with SIGSTOP while
it holds its claim), writing nothing; after a kill -9 of the first, the dataset is captioned."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from PIL import Image
from typer.testing import CliRunner

from forked_cli import start_cli
from lorastudio.jobs.dataset_claims import CLAIMS_DIR, claim_keys, claim_root
from lorastudio.settings import get_settings


def test_a_second_cli_caption_is_refused_and_a_killed_one_blocks_nothing(
    tiny_vlm: Path, tmp_path: Path
) -> None:
    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    settings = get_settings().ensure_dirs()
    folder = settings.datasets_dir / "cards"
    folder.mkdir()
    for i in range(4):
        Image.new("RGB", (40, 32), (60 * i, 80, 200)).save(folder / f"card{i}.png")
    args = ["datasets", "caption", "cards", "--model", str(tiny_vlm), "--device", "cpu", "--max-tokens", "4"]
    log = tmp_path / "first-caption.log"
    first = start_cli(log, *args)  # a real process, forked from this one (tests/forked_cli.py)
    try:
        deadline = time.monotonic() + 120
        keys = len(claim_keys(claim_root(folder, settings.datasets_dir)))  # its path's and its inode's
        # every key's record, not the first: frozen between two keys, the killed run left a staged
        # record that kept <home>/claims/ (RELIABILITY 1282; the session 34 flake on a loaded host)
        while len(list((settings.home / CLAIMS_DIR).glob(f"*.{first.pid}-*.holder"))) < keys:
            assert first.is_alive(), log.read_text(encoding="utf-8")
            assert time.monotonic() < deadline, "the first caption run never claimed its dataset"
            time.sleep(0.02)
        os.kill(first.pid, signal.SIGSTOP)  # holds its claim, writes nothing more
        written = {p.name for p in folder.glob("*.txt")}
        second = CliRunner().invoke(app, args)
        assert second.exit_code == 3, second.output
        assert "dataset cards not captioned: dataset 'cards'" in second.output
        assert f"having its captions written by `lorastudio datasets caption cards` (pid {first.pid})" in (
            second.output
        )
        assert {p.name for p in folder.glob("*.txt")} == written  # the refused run wrote nothing
    finally:
        first.kill()
        first.join(30)
    again = CliRunner().invoke(app, args)  # the kernel dropped the killed run's claim
    assert again.exit_code == 0, again.output
    assert sorted(p.name for p in folder.glob("*.txt")) == [f"card{i}.txt" for i in range(4)]
    assert not (settings.home / CLAIMS_DIR).exists()  # the stale record went, the last holder left no trace


def test_a_model_folder_relative_to_the_current_directory_captions(
    tiny_vlm: Path, tmp_path: Path, monkeypatch
) -> None:
    """README / `tiny vlm`'s help: `lorastudio tiny vlm PATH`, then `datasets caption NAME --model
    PATH`. A relative PATH ("./vlm", "models-here/vlm") was refused as "neither a model folder nor
    a hub id": it is now taken from the directory the command runs in, as `train`'s paths are."""
    import shutil

    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    settings = get_settings().ensure_dirs()
    folder = settings.datasets_dir / "cards"
    folder.mkdir()
    Image.new("RGB", (40, 32), (60, 80, 200)).save(folder / "card0.png")
    shutil.copytree(tiny_vlm, tmp_path / "here" / "vlm")
    monkeypatch.chdir(tmp_path)
    for model in ("./here/vlm", "here/vlm"):
        (folder / "card0.txt").unlink(missing_ok=True)
        args = ["datasets", "caption", "cards", "--model", model, "--device", "cpu", "--max-tokens", "4"]
        out = CliRunner().invoke(app, args)
        assert out.exit_code == 0, out.output
        assert (folder / "card0.txt").is_file()
