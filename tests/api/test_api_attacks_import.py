"""Attacks on `lorastudio datasets import` (and the masks/ it brings, data/mask_import.py): an
import into a dataset a run reads, odd file names in the source folder, masks that clash."""

from __future__ import annotations

import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
import typer
from PIL import Image
from typer.testing import CliRunner

from lorastudio.errors import DatasetBusy
from lorastudio.jobs.dataset_claims import READ, DatasetClaim
from lorastudio.settings import Settings


def _source(tmp_path: Path, stems: tuple[str, ...] = ("a",)) -> Path:
    src = tmp_path / "src"
    (src / "masks").mkdir(parents=True)
    for stem in stems:
        Image.new("RGB", (32, 32), "red").save(src / f"{stem}.png")
        Image.new("L", (32, 32), 255).save(src / "masks" / f"{stem}.png")
    return src


def test_an_import_into_a_dataset_a_run_reads_is_refused_writing_nothing(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    """The import wrote images, captions and masks into a dataset while a `lorastudio train`
    (or a server run) read it, without its write claim (every other writer takes it)."""
    dataset = settings.datasets_dir / "set"
    dataset.mkdir(parents=True)
    Image.new("RGB", (32, 32), "blue").save(dataset / "old.png")
    src = _source(tmp_path)
    (src / "old.txt").write_text("a caption the run would read half-way")
    with DatasetClaim.take(settings.home, settings.datasets_dir, [dataset], READ, "`lorastudio train`"):
        busy = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "set"])
        assert isinstance(busy.exception, DatasetBusy), busy.output
        assert "`lorastudio train`" in str(busy.exception.args) + str(busy.exception)
        assert sorted(p.name for p in dataset.iterdir()) == ["old.png"]
    done = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "set"])
    assert done.exit_code == 0, done.output
    assert sorted(p.name for p in dataset.iterdir()) == ["a.png", "masks", "old.png", "old.txt"]
    with DatasetClaim.take(settings.home, settings.datasets_dir, [dataset], READ, "a run"):
        pass  # the import let go of its claim


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`lorastudio ARGS` in a process whose stdout is strict UTF-8 (as under en_US.UTF-8)."""
    env = {**os.environ, "LORASTUDIO_HOME": str(home), "PYTHONIOENCODING": "utf-8:strict"}
    return subprocess.run(
        [sys.executable, "-m", "lorastudio.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_names_that_are_not_utf8_are_refused_by_name_and_the_rest_imported(
    settings: Settings, tmp_path: Path
) -> None:
    """An image named in latin-1 bytes aborted the whole import (ConfigError from the name check
    before the batch), and printing such a name (a kohya folder's) raised UnicodeEncodeError;
    a name holding a terminal escape sequence was printed raw (it cleared the screen)."""
    src = tmp_path / "old"
    src.mkdir()
    Image.new("RGB", (32, 32)).save(src / "good.png")
    Image.new("RGB", (32, 32)).save(os.fsdecode(os.fsencode(src) + b"/caf\xe9.png"))
    Image.new("RGB", (32, 32)).save(src / "clear\x1b[2J\u202egnp.png")  # a terminal escape, a bidi override
    plain = _cli(settings.home, "datasets", "import", str(src), "--name", "old")
    assert plain.returncode == 0, plain.stderr
    assert "refused caf\\udce9.png: file name: must be valid UTF-8 text" in plain.stdout
    assert "refused clear\\x1b[2J\\u202egnp.png: file name: must not contain control" in plain.stdout
    assert "\x1b" not in plain.stdout and "\u202e" not in plain.stdout
    assert sorted(p.name for p in (settings.datasets_dir / "old").iterdir()) == ["good.png"]
    kohya = tmp_path / "img"
    (kohya / "10_sks").mkdir(parents=True)
    Image.new("RGB", (32, 32)).save(kohya / "10_sks" / "a.png")
    os.mkdir(os.fsencode(kohya) + b"/3_caf\xe9")
    result = _cli(settings.home, "datasets", "import", str(kohya), "--name", "k", "--kohya")
    assert result.returncode == 0, result.stderr
    assert "skipped 3_caf\\udce9: " in result.stdout and "dataset k-10_sks: 1 image(s)" in result.stdout


def test_a_mask_named_in_nfd_is_imported_under_its_image_s_nfc_name(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    """A folder from macOS names `café` in NFD: the image was stored under its NFC name and its
    mask refused as 'its image was refused' (the stems were compared as found)."""
    stem = unicodedata.normalize("NFD", "café")
    src = _source(tmp_path, (stem,))
    result = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "mac"])
    assert result.exit_code == 0, result.output
    dataset = settings.datasets_dir / "mac"
    assert "imported 1 mask(s)" in result.output and "refused" not in result.output
    nfc = unicodedata.normalize("NFC", "café.png")
    assert os.listdir(dataset / "masks") == [nfc] and nfc in os.listdir(dataset)  # as the image is stored


def test_two_masks_of_one_image_are_refused_in_the_import_the_listing_and_the_run(
    cli: typer.Typer, client, settings: Settings, tmp_path: Path, flux_config
) -> None:
    """masks/a.png and masks/a.webp: both were imported and a run used a.webp (the last by name)
    without a word."""
    src = _source(tmp_path, ("a", "b"))
    Image.new("L", (32, 32), 0).save(src / "masks" / "a.webp")
    result = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "two"])
    assert result.exit_code == 0, result.output
    for name in ("a.png", "a.webp"):
        assert (
            f"refused masks/{name}: 2 masks for the image a.* in masks/ (which one?): keep one"
            in result.output
        )
    masks = settings.datasets_dir / "two" / "masks"
    assert sorted(os.listdir(masks)) == ["b.png"]

    Image.new("L", (32, 32), 255).save(masks / "a.png")
    Image.new("L", (32, 32), 0).save(masks / "a.webp")  # copied in by hand
    detail = client.get("/api/datasets/two").json()
    assert {f["file"]: f["mask"] for f in detail["files"]} == {"a.png": None, "b.png": "b.png"}
    assert sorted(d["file"] for d in detail["dropped"]) == ["masks/a.png", "masks/a.webp"]
    config = flux_config(data_dir="two", resolution=32, trigger_word="sks", output_name="two")
    refused = client.post("/api/train/preflight", json={"config": config})
    assert refused.status_code == 400, refused.text
    assert {
        "field": "data_dir",
        "message": "masks/a.png, masks/a.webp: 2 masks for the image a.* (which one?): keep one",
    } in refused.json()["problems"]


@pytest.mark.parametrize("plant", ["file", "link"])
def test_a_dataset_whose_masks_is_a_file_or_a_link_refuses_the_masks_before_anything_is_written(
    cli: typer.Typer, settings: Settings, tmp_path: Path, plant: str
) -> None:
    """The images were imported and then the mask copy raised (NotADirectoryError: a traceback;
    a link: an error after the images were in)."""
    dataset = settings.datasets_dir / "set"
    dataset.mkdir(parents=True)
    if plant == "file":
        (dataset / "masks").write_text("notes")
    else:
        (dataset / "masks").symlink_to(tmp_path, target_is_directory=True)
    src = _source(tmp_path)
    strict = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "set", "--strict"])
    assert strict.exit_code != 0 and not (dataset / "a.png").exists()
    result = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "set"])
    assert result.exit_code == 0, result.output
    assert f"refused masks/: {dataset / 'masks'} is " in result.output and (dataset / "a.png").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # nothing written through the link


def test_a_fifo_or_socket_in_the_source_is_named_as_skipped(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    """A named pipe (or socket) called like an image was left out without a word: every other
    entry the import does not take (other files, links, sub-folders) is listed with the reason."""
    src = _source(tmp_path)
    os.mkfifo(src / "pipe.png")
    result = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "piped"])
    assert result.exit_code == 0, result.output
    assert (
        "skipped pipe.png (not a regular file: a named pipe, socket or device is never read)" in result.output
    )
    assert sorted(p.name for p in (settings.datasets_dir / "piped").iterdir()) == ["a.png", "masks"]
