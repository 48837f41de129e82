"""`lorastudio datasets import DIR --kohya`: a kohya `img/10_sks ball/` folder (which a plain
import or upload does not read) becomes one dataset per folder, and the `datasets` entries that
train them with their repeats are printed (and written with --entries); a run with those entries
passes validation and samples each folder as often as its repeats say."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import typer
from PIL import Image
from typer.testing import CliRunner

from lorastudio.data import scan_dataset
from lorastudio.jobs.preflight import preflight_report
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings


def test_a_kohya_folder_imports_as_datasets_with_their_entries(
    cli: typer.Typer, settings: Settings, tmp_path: Path, tiny_model
) -> None:
    src = tmp_path / "img"
    (src / "10_sks ball").mkdir(parents=True)
    (src / "3_ball").mkdir()
    Image.new("RGB", (32, 32), "red").save(src / "10_sks ball" / "a.png")
    (src / "10_sks ball" / "a.txt").write_text("a red sks ball")
    Image.new("RGB", (32, 32), "blue").save(src / "10_sks ball" / "b.png")
    Image.new("RGB", (32, 32), "green").save(src / "3_ball" / "c.png")
    Image.new("RGB", (32, 32), "white").save(src / "3_ball" / "a.png")  # a name of the other folder too
    (src / "3_ball" / "broken.png").write_bytes(b"not a png")
    out = tmp_path / "entries.toml"
    args = ["datasets", "import", str(src), "--name", "balls", "--kohya", "--entries", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "imported 2 kohya folder(s)" in result.output
    assert "dataset balls-10_sks ball: 2 image(s), 2 captioned" in result.output
    assert "skipped 3_ball/broken.png: " in result.output
    entries = tomllib.loads(out.read_text())["datasets"]
    assert entries == [
        {"path": "balls-10_sks ball", "repeats": 10, "trigger_word": "sks"},
        {"path": "balls-3_ball", "repeats": 3, "trigger_word": "ball"},
    ]
    assert '[[datasets]]\npath = "balls-10_sks ball"\nrepeats = 10' in result.output
    first = settings.datasets_dir / "balls-10_sks ball"
    assert sorted(p.name for p in first.iterdir()) == ["a.png", "b.png", "metadata.jsonl"]
    rows = {
        r["file_name"]: r["text"]
        for r in map(json.loads, (first / "metadata.jsonl").read_text().splitlines())
    }
    assert rows == {"a.png": "a red sks ball", "b.png": "sks ball"}
    scan = scan_dataset(settings.datasets_dir / "balls-3_ball", resolution=32, multiple=16)
    assert [i.caption for i in scan.items] == ["ball", "ball"] and scan.dropped == []

    raw = {"family": "flux", "base_model": str(tiny_model("flux")), "resolution": 32, "datasets": entries}
    report = preflight_report(validate_run(raw, settings, live_output_names=set()))
    assert [(e["label"], e["samples_per_epoch"]) for e in report["dataset"]["entries"]] == [
        ("balls-10_sks ball", 20),
        ("balls-3_ball", 6),
    ]
    again = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "balls", "--kohya"])
    assert again.exit_code != 0 and "already exists" in str(again.exception)


def test_a_kohya_reg_folder_imports_as_regularisation_entries(
    cli: typer.Typer, settings: Settings, tmp_path: Path, tiny_model
) -> None:
    """--reg DIR (kohya's reg folder, `reg/1_person/`): its folders become NAME-reg-<folder>,
    their entries regularisation = true without a trigger word; the run marks them."""
    img, reg = tmp_path / "img", tmp_path / "reg"
    (img / "10_sks person").mkdir(parents=True)
    (reg / "1_person").mkdir(parents=True)
    Image.new("RGB", (32, 32), "red").save(img / "10_sks person" / "a.png")
    for n in range(3):
        Image.new("RGB", (32, 32), (60 * n, 0, 0)).save(reg / "1_person" / f"r{n}.png")
    out = tmp_path / "entries.toml"
    args = [
        "datasets",
        "import",
        str(img),
        "--name",
        "me",
        "--kohya",
        "--reg",
        str(reg),
        "--entries",
        str(out),
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "dataset me-reg-1_person: 3 image(s), 3 captioned" in result.output
    entries = tomllib.loads(out.read_text())["datasets"]
    assert entries == [
        {"path": "me-10_sks person", "repeats": 10, "trigger_word": "sks"},
        {"path": "me-reg-1_person", "repeats": 1, "regularisation": True},
    ]
    raw = {
        "family": "flux", "base_model": str(tiny_model("flux")), "resolution": 32, "datasets": entries,
        "prior_loss_weight": 0.5,
    }  # fmt: skip
    run = validate_run(raw, settings, live_output_names=set())
    assert {it.caption for it in run.scan.items if it.entry == 1} == {"person"}  # the class words, no trigger
    report = preflight_report(run)
    assert [(e["label"], e["regularisation"], e["loss_weight"]) for e in report["dataset"]["entries"]] == [
        ("me-10_sks person", False, 1.0),
        ("me-reg-1_person", True, 0.5),
    ]
    plain = CliRunner().invoke(cli, ["datasets", "import", str(reg), "--name", "x", "--reg", str(reg)])
    assert plain.exit_code != 0 and "--kohya" in plain.output


def test_a_plain_import_of_kohya_folders_says_to_add_kohya_and_names_skipped_folders(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    """The issue's `img/10_sks ball/` imported without --kohya: not "no files in the upload" but
    the kohya folders named with the flag that reads them; beside files, every sub-folder that
    is not imported is named with the reason (a masks/ folder is imported with the images)."""
    from lorastudio.errors import DatasetError

    src = tmp_path / "img"
    (src / "10_sks ball").mkdir(parents=True)
    (src / "3_ball").mkdir()
    Image.new("RGB", (32, 32), "red").save(src / "10_sks ball" / "a.png")
    Image.new("RGB", (32, 32), "blue").save(src / "3_ball" / "b.png")
    plain = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "balls"])
    assert isinstance(plain.exception, DatasetError), plain.output
    assert plain.exception.problems == [
        f"{src} holds no images but kohya folder(s) 10_sks ball, 3_ball: import them with --kohya "
        "(one dataset each, and the datasets entries with their repeats and trigger words)"
    ]
    assert not (settings.datasets_dir / "balls").exists()

    Image.new("RGB", (32, 32), "green").save(src / "c.png")
    (src / "masks").mkdir()
    Image.new("L", (32, 32), 255).save(src / "masks" / "c.png")
    mixed = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "balls"])
    assert mixed.exit_code == 0, mixed.output
    assert "imported 1 file(s)" in mixed.output
    assert "skipped 10_sks ball/ (a kohya folder: import the parent with --kohya)" in mixed.output
    assert "skipped 3_ball/ (a kohya folder: import the parent with --kohya)" in mixed.output
    assert "imported 1 mask(s) into " in mixed.output  # masks/ comes along (data/mask_import.py)
    assert (settings.datasets_dir / "balls" / "masks" / "c.png").is_file()
    one = CliRunner().invoke(cli, ["datasets", "import", str(src / "10_sks ball")])  # the kohya folder itself
    assert one.exit_code == 0, one.output
    assert (
        "note: the folder's name reads as kohya's N_words (repeats 10, words 'sks ball'); import its parent "
        "with --kohya for them" in one.output
    )


def test_import_brings_the_masks_folder_and_names_each_mask_it_leaves_out(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    """A dataset folder with masks/ (issue 29 part 4) imports with its masks: each mask whose
    image is imported is checked and copied into datasets/NAME/masks/; a mask without an image,
    a broken one and a link are named with the reason; --strict imports nothing then."""
    src = tmp_path / "cat"
    (src / "masks").mkdir(parents=True)
    for stem in ("a", "b"):
        Image.new("RGB", (32, 32), "red").save(src / f"{stem}.png")
        Image.new("L", (32, 32), 255).save(src / "masks" / f"{stem}.png")
    Image.new("L", (32, 32), 0).save(src / "masks" / "orphan.png")
    (src / "masks" / "broken.png").write_bytes(b"not a png")
    Image.new("RGB", (32, 32), "red").save(src / "broken.png")
    (src / "masks" / "link.png").symlink_to(src / "masks" / "a.png")
    strict = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "cat", "--strict"])
    assert strict.exit_code != 0 and not (settings.datasets_dir / "cat").exists()
    result = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "cat"])
    assert result.exit_code == 0, result.output
    masks = settings.datasets_dir / "cat" / "masks"
    assert "imported 2 mask(s) into " in result.output
    assert sorted(p.name for p in masks.iterdir()) == ["a.png", "b.png"]
    assert "refused masks/orphan.png: no image orphan.* in the dataset" in result.output
    assert "refused masks/broken.png: " in result.output
    assert "refused masks/link.png: " in result.output
    scan = scan_dataset(settings.datasets_dir / "cat", resolution=32, multiple=16, trigger_word="sks")
    assert [i.path.name for i in scan.items] == ["a.png", "b.png", "broken.png"]


def test_import_refuses_a_mask_of_another_size_than_its_image(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    """A mask whose size is not its image's (the image imported now or already in the dataset)
    is refused by name at import: imported, it made every run on the dataset refuse ("a mask
    must have its image's size") while the import had said "imported 2 mask(s)". A folder with
    masks/ alone adds masks to a dataset that has the images (it was "no files in the upload")."""
    src = tmp_path / "dog"
    (src / "masks").mkdir(parents=True)
    Image.new("RGB", (64, 48), "red").save(src / "a.png")
    Image.new("RGB", (32, 32), "red").save(src / "b.png")
    Image.new("L", (64, 48), 255).save(src / "masks" / "a.png")
    Image.new("L", (10, 10), 255).save(src / "masks" / "b.png")
    result = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "dog"])
    assert result.exit_code == 0, result.output
    assert "imported 1 mask(s) into " in result.output
    assert (
        "refused masks/b.png: 10x10, but b.png is 32x32 (a mask must have its image's size)" in result.output
    )
    target = settings.datasets_dir / "dog"
    assert sorted(p.name for p in (target / "masks").iterdir()) == ["a.png"]
    scan = scan_dataset(target, resolution=32, multiple=16, trigger_word="sks")  # trainable
    assert [i.path.name for i in scan.items] == ["a.png", "b.png"]
    later = tmp_path / "later"  # a mask for an image the dataset has already
    (later / "masks").mkdir(parents=True)
    Image.new("L", (48, 64), 255).save(later / "masks" / "b.png")
    again = CliRunner().invoke(cli, ["datasets", "import", str(later), "--name", "dog"])
    assert "refused masks/b.png: 48x64, but b.png is 32x32" in again.output
    assert sorted(p.name for p in (target / "masks").iterdir()) == ["a.png"]
    Image.new("L", (32, 32), 128).save(later / "masks" / "b.png")  # masks/ alone adds the masks
    fixed = CliRunner().invoke(cli, ["datasets", "import", str(later), "--name", "dog"])
    assert fixed.exit_code == 0 and "imported 1 mask(s) into " in fixed.output, fixed.output
    assert sorted(p.name for p in (target / "masks").iterdir()) == ["a.png", "b.png"]


def test_a_kohya_folder_brings_its_masks(cli: typer.Typer, settings: Settings, tmp_path: Path) -> None:
    """A kohya folder's masks/ comes along like a plain import's (it was skipped as "a link or a
    folder"), each checked (a mask of another size is named); --strict refuses the import then."""
    src = tmp_path / "img"
    (src / "10_sks ball" / "masks").mkdir(parents=True)
    for stem in ("a", "b"):
        Image.new("RGB", (32, 32), "red").save(src / "10_sks ball" / f"{stem}.png")
    Image.new("L", (32, 32), 255).save(src / "10_sks ball" / "masks" / "a.png")
    Image.new("L", (8, 8), 255).save(src / "10_sks ball" / "masks" / "b.png")
    args = ["datasets", "import", str(src), "--name", "mk", "--kohya"]
    strict = CliRunner().invoke(cli, [*args, "--strict"])
    assert strict.exit_code != 0 and not (settings.datasets_dir / "mk-10_sks ball").exists()
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "dataset mk-10_sks ball: 2 image(s), 2 captioned, 1 mask(s)" in result.output
    assert "skipped 10_sks ball/masks/b.png: 8x8, but b.png is 32x32" in result.output
    assert "10_sks ball/masks: " not in result.output
    dataset = settings.datasets_dir / "mk-10_sks ball"
    assert sorted(p.name for p in (dataset / "masks").iterdir()) == ["a.png"]


def test_import_brings_the_control_folders_and_names_each_control_it_leaves_out(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    """A paired dataset folder (control/, control_2/: data/pairs.py) imports with its controls,
    as masks/ does: each control with a target of its stem is stored in datasets/NAME/<slot>/;
    one without a target, a non-image and a link are named with the reason; the imported dataset
    pairs as the source did. A kohya folder's control/ comes along into its dataset too."""
    src = tmp_path / "pairs"
    for folder in ("control", "control_2"):
        (src / folder).mkdir(parents=True)
    for stem, colour in (("a", "red"), ("b", "blue")):
        Image.new("RGB", (32, 32), colour).save(src / f"{stem}.png")
        (src / f"{stem}.txt").write_text(f"make {stem} green")
    Image.new("RGB", (48, 32), "white").save(src / "control" / "a.png")
    Image.new("RGB", (32, 32), "black").save(src / "control" / "b.jpg")
    Image.new("RGB", (32, 32), "grey").save(src / "control_2" / "a.webp")
    Image.new("RGB", (32, 32), "grey").save(src / "control" / "orphan.png")
    (src / "control" / "notes.txt").write_text("not a control")
    (src / "control" / "link.png").symlink_to(src / "a.png")
    result = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "pairs"])
    assert result.exit_code == 0, result.output
    out = result.output.replace("\n", " ")
    target = settings.datasets_dir / "pairs"
    assert sorted(p.name for p in (target / "control").iterdir()) == ["a.png", "b.jpg"]
    assert sorted(p.name for p in (target / "control_2").iterdir()) == ["a.webp"]
    assert "refused control/orphan.png: no target image named orphan.*" in out
    assert "refused control/notes.txt: a control image must be PNG, JPEG or WebP" in out
    assert "skipped control/link.png (a symbolic link (not followed))" in out
    assert "skipped control/" not in out.replace("skipped control/link.png", "")
    scan = scan_dataset(target, resolution=32, multiple=16, control_images=(0, 4), family="flux2")
    assert [(it.path.name, [c.relative_to(target).as_posix() for c in it.controls]) for it in scan.items] == [
        ("a.png", ["control/a.png", "control_2/a.webp"]),
        ("b.png", ["control/b.jpg"]),
    ]

    kohya = tmp_path / "img"
    (kohya / "10_sks ball" / "control").mkdir(parents=True)
    Image.new("RGB", (32, 32), "red").save(kohya / "10_sks ball" / "c.png")
    Image.new("RGB", (32, 32), "blue").save(kohya / "10_sks ball" / "control" / "c.png")
    Image.new("RGB", (32, 32), "blue").save(kohya / "10_sks ball" / "control" / "d.png")
    imported = CliRunner().invoke(cli, ["datasets", "import", str(kohya), "--name", "balls", "--kohya"])
    assert imported.exit_code == 0, imported.output
    assert "skipped 10_sks ball/control: " not in imported.output
    assert "skipped 10_sks ball/control/d.png: no target image named d.*" in imported.output.replace(
        "\n", " "
    )
    assert [p.name for p in (settings.datasets_dir / "balls-10_sks ball" / "control").iterdir()] == ["c.png"]


def test_import_names_a_misspelt_control_folder_as_one(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    """A source's `Control/` (or `controls/`) was skipped as "a sub-folder: import it on its own",
    advice that would import the control images as targets of a dataset of their own. It is now
    named as a control folder spelt otherwise, and still not imported."""
    src = tmp_path / "pairs"
    (src / "Control").mkdir(parents=True)
    Image.new("RGB", (32, 32), "red").save(src / "a.png")
    (src / "a.txt").write_text("make it green")
    Image.new("RGB", (32, 32), "white").save(src / "Control" / "a.png")
    result = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "pairs"])
    assert result.exit_code == 0, result.output
    out = result.output.replace("\n", " ")
    assert "skipped Control/ (not read as a control folder (control images go in control/" in out, out
    assert "import it on its own" not in out
    assert not (settings.datasets_dir / "pairs" / "Control").exists()
