"""A kohya layout read in place (`datasets/k/10_sks/*.png`, RELIABILITY 2201): a run reads it
with `kohya_folders` and fix 2053 captions it in place, but the Datasets list said 0 images, the
dataset's page listed none and named `10_sks` as a dropped sub-folder, so the web never offered
"Caption with AI". Now the list and the page count and list its images as a run of the folders
reads them, under `<folder>/<name>` with their folder's repeats, and those names reach the image's
thumbnail, caption edit and delete."""

from __future__ import annotations

import io
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from lorastudio.data import scan_dataset
from lorastudio.settings import Settings


def _png(colour: str) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), colour).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def layout(settings: Settings) -> Path:
    """k/10_sks: a.png captioned by a.txt, b.png by nothing (the folder's words); k/2_cat dog:
    c.png captioned by a kohya `.caption` file."""
    k = settings.datasets_dir / "k"
    for folder, name, colour in (
        ("10_sks", "a.png", "red"),
        ("10_sks", "b.png", "green"),
        ("2_cat dog", "c.png", "blue"),
    ):
        (k / folder).mkdir(parents=True, exist_ok=True)
        (k / folder / name).write_bytes(_png(colour))
    (k / "10_sks" / "a.txt").write_text("a red square\n")
    (k / "2_cat dog" / "c.caption").write_text("a blue square\n")
    return k


def test_a_kohya_layout_is_listed_as_a_run_reads_it(client: TestClient, layout: Path) -> None:
    (summary,) = [d for d in client.get("/api/datasets").json()["datasets"] if d["name"] == "k"]
    assert (summary["images"], summary["captions"]) == (3, 2), summary  # was (0, 0)
    detail = client.get("/api/datasets/k").json()
    assert [(f["file"], f["caption"], f["repeats"]) for f in detail["files"]] == [
        ("10_sks/a.png", "a red square", 10),
        ("10_sks/b.png", None, 10),
        ("2_cat dog/c.png", "a blue square", 2),
    ]
    assert detail["dropped"] == [], detail[
        "dropped"
    ]  # `10_sks` was "sub-folder (... not scanned recursively)"
    ran = {p.name for sub in ("10_sks", "2_cat dog") for p in (it.path for it in scan_dataset(
        layout / sub, resolution=64, multiple=16, kohya=True, default_caption="w").items)}  # fmt: skip
    assert ran == {f["file"].split("/")[1] for f in detail["files"]}
    page = client.get("/api/datasets/k", params={"offset": 1, "limit": 1}).json()
    assert [f["file"] for f in page["files"]] == ["10_sks/b.png"] and page["total_files"] == 3


def test_a_kohya_layouts_listed_names_reach_thumbnail_caption_and_delete(
    client: TestClient, layout: Path
) -> None:
    thumb = client.get(f"/api/datasets/k/thumbnails/{quote('10_sks/b.png', safe='/')}", params={"size": 16})
    assert thumb.status_code == 200, thumb.text
    assert Image.open(io.BytesIO(thumb.content)).convert("RGB").getpixel((8, 8))[1] > 100  # green
    put = client.put(f"/api/datasets/k/captions/{quote('2_cat dog/c.png', safe='/')}",
                     json={"caption": "a blue box", "expected": "a blue square"})  # fmt: skip
    assert put.status_code == 200, put.text
    assert (layout / "2_cat dog" / "c.caption").read_text() == "a blue box\n"  # its one caption file
    assert not (layout / "2_cat dog" / "c.txt").exists()  # a second caption the run would compare
    stale = client.put(f"/api/datasets/k/captions/{quote('2_cat dog/c.png', safe='/')}",
                       json={"caption": "x", "expected": "a blue square"})  # fmt: skip
    assert stale.status_code == 409, stale.text
    gone = client.delete(f"/api/datasets/k/images/{quote('10_sks/a.png', safe='/')}")
    assert gone.status_code == 200 and gone.json()["deleted"] == ["10_sks/a.png", "10_sks/a.txt"], gone.text
    other = client.get(f"/api/datasets/k/thumbnails/{quote('masks/x.png', safe='/')}")
    assert other.status_code == 404  # only a kohya folder of the dataset


def test_a_bulk_caption_edit_of_a_kohya_layout_edits_its_folders_captions(
    client: TestClient, layout: Path
) -> None:
    """The page's Bulk edit (shown with the files) edited nothing in such a layout: its top level
    has no caption. Now each image's caption files, as a run of the folder reads them; a journal
    naming a sub-folder's files is finished by the next holder of the lock, one naming a path out
    of the dataset is dropped."""
    from lorastudio.data.writes import RENAMES_JOURNAL, dataset_lock

    answer = client.post("/api/datasets/k/captions", json={"prepend": "sks, "})
    assert answer.status_code == 200, answer.text
    assert answer.json()["files"] == ["10_sks/a.png", "2_cat dog/c.png"]  # b.png has none: kept so
    assert (layout / "10_sks" / "a.txt").read_text() == "sks, a red square\n"
    assert (layout / "2_cat dog" / "c.caption").read_text() == "sks, a blue square\n"
    assert not (layout / "10_sks" / "b.txt").exists()
    (layout / "10_sks" / ".a.staged").write_text("staged\n")  # a kill between two renames
    (layout / RENAMES_JOURNAL).write_text('[["10_sks/.a.staged", "10_sks/a.txt"]]')
    with dataset_lock(layout.parent, "k"):
        assert (layout / "10_sks" / "a.txt").read_text() == "staged\n"
    (layout / RENAMES_JOURNAL).write_text('[["10_sks/a.txt", "../x.txt"]]')
    with dataset_lock(layout.parent, "k"):
        assert not (layout.parent / "x.txt").exists() and not (layout / RENAMES_JOURNAL).exists()


def test_an_upload_into_a_kohya_layout_is_refused_naming_its_folders(
    client: TestClient, layout: Path
) -> None:
    """The page keeps its upload box: an image stored at the layout's top level ended the layout
    (the list and page showed that image alone, `10_sks` dropped again; a run of the folders
    never read it). Now refused, nothing stored, the layout listed as it was."""
    answer = client.post("/api/datasets/k/files", files=[("files", ("new.png", _png("white"), "image/png"))])
    assert answer.status_code == 400, answer.text
    assert "k is a kohya layout read in place (its images are in 10_sks/, 2_cat dog/)" in answer.text
    assert not (layout / "new.png").exists()
    assert client.get("/api/datasets/k").json()["total_files"] == 3
