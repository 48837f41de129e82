"""Attacks on the two ways masks come in (data/mask_import.py): `lorastudio datasets import`
(plain, a masks/-only folder, --kohya) and the API's upload of fields named `mask`
(data/mask_upload.py). Both run one check (safe name stored in NFC, one mask per stem, the
dataset's masks/ a real folder, the image's size), and the CLI prints every file name escaped."""

from __future__ import annotations

import io
import os
import unicodedata
from pathlib import Path

import pytest
import typer
from fastapi.testclient import TestClient
from PIL import Image
from typer.testing import CliRunner

from lorastudio.errors import DatasetBusy
from lorastudio.jobs.dataset_claims import READ, DatasetClaim
from lorastudio.settings import Settings


def _png(size: tuple[int, int], mode: str = "L", color: object = 255) -> bytes:
    buf = io.BytesIO()
    Image.new(mode, size, color).save(buf, format="PNG")
    return buf.getvalue()


def _dataset(client: TestClient, name: str, stems: tuple[str, ...]) -> None:
    files = [("f", (f"{stem}.png", _png((32, 32), "RGB", "red"))) for stem in stems]
    made = client.post(f"/api/datasets/{name}/files", files=files)
    assert made.status_code == 201, made.text


def test_the_mask_upload_checks_names_stems_and_duplicates_as_the_import_does(
    client: TestClient, settings: Settings
) -> None:
    """The upload named its own name check and took the first of a name sent twice (NFD and NFC
    spellings of one name wrote one file, the other dropped without a word); two masks of one stem
    (a.png, a.webp) went through the import's per-stem count only when staged."""
    _dataset(client, "up", ("a", "café", "b"))
    nfd = unicodedata.normalize("NFD", "café.png")
    masks = [
        ("mask", (nfd, _png((32, 32)))),  # stored under its NFC name, as the image was
        ("mask", ("a.png", _png((32, 32)))),
        ("mask", ("a.webp", _png((32, 32)))),  # a second mask of a: neither is guessed
        ("mask", ("b.png", _png((32, 32)))),
        ("mask", (unicodedata.normalize("NFC", "b.png"), _png((32, 32), color=0))),  # b.png again
        ("mask", ("bad\x1bname.png", _png((32, 32)))),
    ]
    made = client.post("/api/datasets/up/files", files=masks)
    assert made.status_code == 201, made.text
    nfc = unicodedata.normalize("NFC", "café.png")
    assert made.json()["committed"] == [f"masks/{nfc}"]
    reasons = {r["file"]: r["reason"] for r in made.json()["refused"]}
    assert reasons == {
        "masks/a.png": "2 masks for the image a.* in masks/ (which one?): keep one",
        "masks/a.webp": "2 masks for the image a.* in masks/ (which one?): keep one",
        "masks/b.png": "sent 2 times in one upload (which one?): send one",
        "masks/bad\x1bname.png": "file name: must not contain control characters",
    }
    assert os.listdir(settings.datasets_dir / "up" / "masks") == [nfc]
    detail = client.get("/api/datasets/up").json()
    assert {f["file"]: f["mask"] for f in detail["files"]} == {"a.png": None, "b.png": None, nfc: nfc}


@pytest.mark.parametrize("plant", ["file", "link"])
def test_the_mask_upload_into_a_dataset_whose_masks_is_a_file_or_a_link_writes_nothing(
    client: TestClient, settings: Settings, tmp_path: Path, plant: str
) -> None:
    _dataset(client, "planted", ("a",))
    masks = settings.datasets_dir / "planted" / "masks"
    outside = tmp_path / "outside"
    outside.mkdir()
    if plant == "file":
        masks.write_text("notes")
    else:
        masks.symlink_to(outside, target_is_directory=True)
    refused = client.post("/api/datasets/planted/files", files=[("mask", ("a.png", _png((32, 32))))])
    assert refused.status_code == 400, refused.text
    assert f"{masks} is " in refused.text and "no mask is imported" in refused.text
    assert list(outside.iterdir()) == []
    assert masks.is_symlink() if plant == "link" else masks.read_text() == "notes"
    assert not list((settings.datasets_dir / ".uploads").glob("*"))


def test_a_masks_only_import_takes_the_write_claim_and_escapes_bad_names(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    """A folder holding masks/ alone adds masks to a dataset that has the images: under the
    dataset's write claim like any import (refused, writing nothing, while a run reads it), with
    a refused mask's odd name printed escaped and a mask of another size refused by name."""
    dataset = settings.datasets_dir / "set"
    dataset.mkdir(parents=True)
    for stem in ("a", "b"):
        Image.new("RGB", (32, 32), "blue").save(dataset / f"{stem}.png")
    src = tmp_path / "later"
    (src / "masks").mkdir(parents=True)
    Image.new("L", (32, 32), 255).save(src / "masks" / "a.png")
    Image.new("L", (16, 16), 255).save(src / "masks" / "b.png")
    Image.new("L", (32, 32), 255).save(src / "masks" / "\u202egnp.a.png")
    with DatasetClaim.take(settings.home, settings.datasets_dir, [dataset], READ, "`lorastudio train`"):
        busy = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "set"])
        assert isinstance(busy.exception, DatasetBusy), busy.output
        assert not (dataset / "masks").exists()
    done = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "set"])
    assert done.exit_code == 0, done.output
    assert "imported 1 mask(s)" in done.output and "\u202e" not in done.output
    assert "refused masks/\\u202egnp.a.png: file name: must not contain invisible" in done.output
    assert "refused masks/b.png: 16x16, but b.png is 32x32 (a mask must have its image's size)" in done.output
    assert os.listdir(dataset / "masks") == ["a.png"]


def test_kohya_masks_go_to_the_checked_dataset_names_and_are_refused_like_a_plain_import_s(
    cli: typer.Typer, settings: Settings, tmp_path: Path
) -> None:
    """Each kohya folder's masks/ goes into the dataset `_kohya_dataset_names` names; a folder
    whose dataset name is refused is skipped with its masks; two masks of one stem are refused
    (and --strict imports nothing then)."""
    src = tmp_path / "img"
    good = src / "10_sks"
    (good / "masks").mkdir(parents=True)
    Image.new("RGB", (32, 32), "red").save(good / "a.png")
    Image.new("RGB", (32, 32), "red").save(good / "b.png")
    Image.new("L", (32, 32), 255).save(good / "masks" / "a.png")
    Image.new("L", (32, 32), 255).save(good / "masks" / "b.png")
    Image.new("L", (32, 32), 0).save(good / "masks" / "b.webp")
    long = src / f"3_{'x' * 120}"
    (long / "masks").mkdir(parents=True)
    Image.new("RGB", (32, 32), "red").save(long / "c.png")
    Image.new("L", (32, 32), 255).save(long / "masks" / "c.png")
    strict = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "k", "--kohya", "--strict"])
    assert strict.exit_code != 0 and not list(settings.datasets_dir.glob("k-*"))
    result = CliRunner().invoke(cli, ["datasets", "import", str(src), "--name", "k", "--kohya"])
    assert result.exit_code == 0, result.output
    assert "dataset k-10_sks: 2 image(s), 2 captioned, 1 mask(s)" in result.output
    for name in ("b.png", "b.webp"):
        assert f"skipped 10_sks/masks/{name}: 2 masks for the image b.* in masks/" in result.output
    assert f"skipped {long.name}: dataset name must be at most" in result.output
    assert f"{long.name}/masks" not in result.output  # skipped with its folder, not as 'a link or a folder'
    assert os.listdir(settings.datasets_dir / "k-10_sks" / "masks") == ["a.png"]
    assert [p.name for p in settings.datasets_dir.glob("k-*")] == ["k-10_sks"]


def test_the_listing_shows_a_mask_named_in_another_unicode_normalisation(
    client: TestClient, settings: Settings
) -> None:
    """A mask copied into masks/ from macOS (NFD name) is the NFC image's mask in the listing, as
    the run pairs it (data.paths.stem_key)."""
    _dataset(client, "nf", ("café",))
    nfd = unicodedata.normalize("NFD", "café.png")
    (settings.datasets_dir / "nf" / "masks").mkdir()
    (settings.datasets_dir / "nf" / "masks" / nfd).write_bytes(_png((32, 32)))
    detail = client.get("/api/datasets/nf").json()
    assert {f["file"]: f["mask"] for f in detail["files"]} == {unicodedata.normalize("NFC", "café.png"): nfd}
    assert detail["dropped"] == []
