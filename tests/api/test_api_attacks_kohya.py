"""Attacks on the kohya import (`lorastudio datasets import --kohya [--reg]`) and on
`kohya_folders = true`: folder names with control / text-direction characters, names too long
for a dataset, a repeat count past a run's limit (an epoch of billions of samples), a reg
folder equal to the image folder. Each is skipped or refused with the reason; nothing the
studio refuses elsewhere (a dataset name, a config) is created."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
import typer
from PIL import Image
from typer.testing import CliRunner

import lorastudio.data.mask_import as mask_import
from lorastudio.data.decoded import DecodedRecord
from lorastudio.data.safe_open import folder_identity
from lorastudio.errors import ConfigError, DatasetError
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings

ODD = {
    "10_a\u202egnp.exe": "U+202E",  # a right-to-left override: the name reads backwards
    "10_ctl\x01x": "control",
    "10_del\x7fx": "control",  # DEL made the printed TOML unreadable
    "999999999_big": "at most 10000",
}


def _img(folder: Path) -> None:
    folder.mkdir(parents=True)
    Image.new("RGB", (32, 32), "red").save(folder / "a.png")


def test_odd_kohya_folders_are_skipped_with_the_reason(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    src = tmp_path / "img"
    for name in [*ODD, "10_" + "a" * 120, "5_ok"]:
        _img(src / name)
    (src / "3_empty").mkdir()
    out = tmp_path / "entries.toml"
    args = ["datasets", "import", str(src), "--name", "k", "--kohya", "--entries", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in settings.datasets_dir.iterdir() if not p.name.startswith(".")) == ["k-5_ok"]
    assert tomllib.loads(out.read_text())["datasets"] == [
        {"path": "k-5_ok", "repeats": 5, "trigger_word": "ok"}
    ]
    for why in ODD.values():
        assert why in result.output
    assert "must be at most 100 characters" in result.output  # k-10_aaa...: too long a dataset name
    assert "skipped 3_empty: no images to import in this folder" in result.output
    strict = CliRunner().invoke(cli, [*args[:-2], "--name", "k2", "--strict"])
    assert strict.exit_code != 0 and not (settings.datasets_dir / "k2-5_ok").exists()


def test_a_reg_folder_that_is_the_image_folder_is_refused(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    src = tmp_path / "img"
    _img(src / "5_ok")
    for reg in (src, src / "5_ok", tmp_path):
        args = ["datasets", "import", str(src), "--name", "r", "--kohya", "--reg", str(reg)]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2 and "--reg" in result.output, result.output
    assert not any(settings.datasets_dir.glob("r-*"))


@pytest.mark.parametrize("folder", ["999999999_big", "10_ctl\x01x"])
def test_kohya_folders_past_the_limits_refuse_the_run(settings: Settings, tiny_model, folder: str) -> None:
    _img(settings.datasets_dir / "kset" / folder)
    raw = {"family": "flux", "base_model": str(tiny_model("flux")), "resolution": 32, "data_dir": "kset"}
    with pytest.raises((ConfigError, DatasetError)) as err:
        validate_run({**raw, "kohya_folders": True}, settings, live_output_names=set())
    assert "kset/" in str(err.value) or "kset/" in str(getattr(err.value, "problems", ""))


def test_kohya_caption_files_are_read_and_two_that_disagree_skip_their_image(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    """kohya's sd-scripts read `<image>.caption` by default (--caption_extension), most guides use
    .txt: the import read .txt only, so .caption captions (and a `.TXT`) were replaced by the
    folder's words, and a .txt and a .caption that disagree were taken silently."""
    src = tmp_path / "img"
    folder = src / "5_sks cat"
    _img(folder)
    for stem in "bcde":
        Image.new("RGB", (32, 32), "blue").save(folder / f"{stem}.png")
    (folder / "a.caption").write_text("a from .caption")
    (folder / "b.txt").write_text("b from .txt")
    (folder / "b.caption").write_text("b from .caption")
    (folder / "c.TXT").write_text("c from .TXT")
    (folder / "d.txt").write_text("the same")
    (folder / "d.caption").write_text("the same\n")
    (src / "dataset_config.toml").write_text("[general]\ncaption_extension = '.caption'\n")
    args = ["datasets", "import", str(src), "--name", "k", "--kohya"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    table = (settings.datasets_dir / "k-5_sks cat" / "metadata.jsonl").read_text().splitlines()
    rows = {row["file_name"]: row["text"] for row in map(json.loads, table)}
    assert rows == {
        "a.png": "a from .caption",
        "c.png": "c from .TXT",
        "d.png": "the same",
        "e.png": "sks cat",
    }
    assert "skipped 5_sks cat/b.png: b.caption and b.txt disagree" in result.output
    assert "skipped dataset_config.toml: a kohya dataset config is not read" in result.output
    strict = CliRunner().invoke(cli, [*args[:-3], "--name", "k2", "--kohya", "--strict"])
    assert strict.exit_code != 0 and "b.caption and b.txt disagree" in str(strict.exception)
    assert not (settings.datasets_dir / "k2-5_sks cat").exists()


@pytest.mark.parametrize("stop_at", [2, 3])  # the second image folder; the reg folder
def test_an_import_stopped_part_way_leaves_no_dataset_and_runs_again(
    cli: typer.Typer, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_at: int
) -> None:
    """Each kohya folder's dataset used to be renamed into place as soon as it was stored (and the
    --reg folders imported after all of them): an import killed (or failing) part-way left the
    first datasets under their final names, and the same import run again was refused ("dataset
    k-1_a already exists"). Every dataset is now staged whole under datasets/.uploads/ (a server
    start removes a killed import's) and all are renamed into place at the end."""
    src, reg = tmp_path / "img", tmp_path / "reg"
    for folder in (src / "1_a", src / "2_b", reg / "1_person"):
        _img(folder)
    real = mask_import.copy_masks
    staged: list[Path] = []

    def stopped(plan: Any, target: Path, *rest: Any, **named: Any) -> Any:
        staged.append(target)
        if len(staged) == stop_at:  # this folder's images are stored, its masks to come
            raise RuntimeError("killed here")
        return real(plan, target, *rest, **named)

    monkeypatch.setattr(mask_import, "copy_masks", stopped)
    args = ["datasets", "import", str(src), "--name", "k", "--kohya", "--reg", str(reg)]
    result = CliRunner().invoke(cli, args)
    assert isinstance(result.exception, RuntimeError), result.output
    assert sorted(p.name for p in settings.datasets_dir.iterdir() if not p.name.startswith(".")) == []
    assert staged[0].name == "k-1_a" and staged[0].parent.parent.name == ".uploads"
    assert not list((settings.datasets_dir / ".uploads").glob("*"))  # its staging went with it
    monkeypatch.setattr(mask_import, "copy_masks", real)
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 0, again.output
    for name in ("k-1_a", "k-2_b", "k-reg-1_person"):
        folder = settings.datasets_dir / name
        assert sorted(p.name for p in folder.iterdir()) == ["a.png", "metadata.jsonl"]
        record = DecodedRecord.load(settings.decoded_record_dir, folder, folder_identity(folder))
        assert record.known(folder / "a.png") is not None  # decoded by the import: not again by a check


def test_planning_an_import_lists_each_folder_once_whatever_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan listed the whole folder again for every caption file (to find its image): 10,000
    captioned images took 545 s to plan (2.5 s now). Each folder is listed once."""
    from lorastudio.data.kohya import plan_kohya_import

    listings: list[Path] = []
    real = Path.iterdir

    def counted(self: Path) -> Any:
        listings.append(self)
        return real(self)

    monkeypatch.setattr(Path, "iterdir", counted)
    for count in (3, 30):
        folder = tmp_path / str(count) / "2_sks cat"
        folder.mkdir(parents=True)
        for i in range(count):
            (folder / f"{i}.png").write_bytes(b"")  # the plan reads names, not pixels
            (folder / f"{i}.txt").write_text(f"caption {i}")
        listings.clear()
        plan = plan_kohya_import(folder.parent, flat=False)
        assert len(plan.images) == count
        assert listings.count(folder) == 1, (count, listings.count(folder))


def test_two_folders_of_one_dataset_name_are_skipped_not_merged(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    """`10_café` composed (NFC) and decomposed (NFD, as macOS writes names) are two folders whose
    dataset name is one once normalised: both were imported into `k-10_café`, the second's
    a.png replacing the first's, and the entries listed the dataset twice. Both are skipped,
    each naming the other; the rest is imported."""
    src = tmp_path / "img"
    for folder in ("10_caf\u00e9", "10_cafe\u0301", "2_ok"):
        _img(src / folder)
    out = tmp_path / "entries.toml"
    args = ["datasets", "import", str(src), "--name", "k", "--kohya", "--entries", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in settings.datasets_dir.iterdir() if not p.name.startswith(".")) == ["k-2_ok"]
    assert tomllib.loads(out.read_text())["datasets"] == [
        {"path": "k-2_ok", "repeats": 2, "trigger_word": "ok"}
    ]
    assert "the folder '10_cafe\\u0301' makes the same dataset name k-10_caf\u00e9" in result.output
    assert "the folder '10_caf\\xe9' makes the same dataset name" in result.output
    strict = CliRunner().invoke(cli, [*args[:-2], "--name", "k2", "--strict"])
    assert strict.exit_code != 0 and not any(settings.datasets_dir.glob("k2-*"))


def test_a_run_reading_kohya_folders_in_place_uses_their_caption_files(
    settings: Settings, tiny_model
) -> None:
    """`kohya_folders = true` read `.txt` captions only: a folder captioned with kohya's default
    `.caption` trained on the folder's words (the import read the captions). The run's check now
    reads them by the import's rule, and refuses two that disagree naming both, before any model
    is loaded (every such image at once)."""
    folder = settings.datasets_dir / "kset" / "5_sks cat"
    _img(folder)
    (folder / "a.caption").write_text("a photo of sks cat")
    raw = {"family": "flux", "base_model": str(tiny_model("flux")), "resolution": 32, "data_dir": "kset"}
    run = validate_run({**raw, "kohya_folders": True}, settings, live_output_names=set())
    assert [it.caption for it in run.scan.items] == ["sks, a photo of sks cat"]
    Image.new("RGB", (32, 32), "blue").save(folder / "b.png")
    (folder / "a.txt").write_text("another caption")
    (folder / "b.TXT").write_text("b one")
    (folder / "b.caption").write_text("b two")
    with pytest.raises((ConfigError, DatasetError)) as err:
        validate_run({**raw, "kohya_folders": True}, settings, live_output_names=set())
    said = str(err.value) + str(getattr(err.value, "problems", ""))
    assert "a.caption and a.txt disagree" in said and "b.TXT and b.caption disagree" in said, said


def test_an_entries_file_that_cannot_be_written_is_refused_before_any_import(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    """`--entries entries.toml` naming an existing file imported every folder, then failed (exit
    2, "already exists"), and the rerun with another file was refused: "dataset k-5_ok already
    exists". Now the file is checked first and nothing is imported."""
    src = tmp_path / "img"
    _img(src / "5_ok")
    taken = tmp_path / "entries.toml"
    taken.write_text("# mine\n")
    for entries, said in ((taken, "already exists"), (tmp_path / "no" / "e.toml", "is not a folder")):
        args = ["datasets", "import", str(src), "--name", "k", "--kohya", "--entries", str(entries)]
        result = CliRunner().invoke(cli, args)
        # a DatasetError: `lorastudio` (cli/app.main) prints it and exits 2
        assert isinstance(result.exception, DatasetError) and said in str(result.exception), result.output
        assert not any(settings.datasets_dir.glob("k-*")), result.output
    assert taken.read_text() == "# mine\n"
    fresh = tmp_path / "e.toml"
    args = ["datasets", "import", str(src), "--name", "k", "--kohya", "--entries", str(fresh)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0 and tomllib.loads(fresh.read_text())["datasets"][0]["path"] == "k-5_ok"


def test_a_taken_reg_dataset_name_is_refused_before_the_image_folders_import(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    """`--kohya --name q --reg R` with `q-reg-1_dog` taken imported `q-5_ok` first, then was
    refused, and the rerun was refused for `q-5_ok`. Now every name is checked first."""
    src, reg = tmp_path / "img", tmp_path / "reg"
    _img(src / "5_ok")
    _img(reg / "1_dog")
    _img(settings.datasets_dir / "q-reg-1_dog")
    args = ["datasets", "import", str(src), "--name", "q", "--kohya", "--reg", str(reg)]
    result = CliRunner().invoke(cli, args)
    assert isinstance(result.exception, DatasetError) and "q-reg-1_dog already exists" in str(
        result.exception
    )
    assert not (settings.datasets_dir / "q-5_ok").exists(), result.output


def test_every_kohya_row_names_an_image_stored_under_its_stored_name(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    """An image named with a control character was refused by the upload's name rule and its
    metadata row stored all the same, naming no file (RELIABILITY 2101); an image named
    decomposed (NFD, as macOS writes names) was stored under its NFC name and its caption's row
    under the NFD one: imported uncaptioned, "2 image(s), 1 captioned" (RELIABILITY 2102)."""
    import unicodedata

    folder = tmp_path / "img" / "5_sks cat"
    _img(folder)
    nfc, nfd = (unicodedata.normalize(form, "café") for form in ("NFC", "NFD"))
    for stem in (nfd, "new\nline"):
        Image.new("RGB", (32, 32), "blue").save(folder / f"{stem}.png")
        (folder / f"{stem}.txt").write_text(f"{stem} caption")
    result = CliRunner().invoke(cli, ["datasets", "import", str(tmp_path / "img"), "--name", "k", "--kohya"])
    assert result.exit_code == 0, result.output
    assert "dataset k-5_sks cat: 2 image(s), 2 captioned" in result.output
    assert "skipped 5_sks cat/new\\nline.png: file name: must not contain control characters" in result.output
    dataset = settings.datasets_dir / "k-5_sks cat"
    rows = [json.loads(line) for line in (dataset / "metadata.jsonl").read_text().splitlines()]
    assert [(r["file_name"], r["text"]) for r in rows] == [
        ("a.png", "sks cat"),
        (f"{nfc}.png", f"{nfd} caption"),
    ]
    assert sorted(p.name for p in dataset.iterdir()) == ["a.png", f"{nfc}.png", "metadata.jsonl"]
