"""Races of a listing with a delete (another tab, a CLI, a caption job's cleanup): a file or the
masks/ folder removed between the listing of the folder and the reading of the entry. The
dataset's listing answered 500 (FileNotFoundError); it now lists what is still there."""

from __future__ import annotations

import shutil

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from lorastudio.api.routes import dataset_thumbnails as thumbnail_routes
from lorastudio.data import dataset_detail, discovery, masks
from lorastudio.settings import Settings


@pytest.fixture
def dataset(settings: Settings):
    folder = settings.datasets_dir / "set"
    (folder / "masks").mkdir(parents=True)
    for stem in ("a", "b"):
        Image.new("RGBA", (32, 32), (200, 10, 10, 128)).save(folder / f"{stem}.png")
        Image.new("L", (32, 32), 255).save(folder / "masks" / f"{stem}.png")
    return folder


def test_an_image_deleted_while_its_dataset_is_listed_is_left_out(
    client: TestClient, dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = discovery.discover

    def listed_then_deleted(root):
        files = real(root)
        if root == dataset:
            (dataset / "b.png").unlink()  # the delete lands after the folder was listed
        return files

    monkeypatch.setattr(dataset_detail, "discover", listed_then_deleted)  # the detail's listing
    answer = client.get("/api/datasets/set")
    assert answer.status_code == 200, answer.text
    assert [f["file"] for f in answer.json()["files"]] == ["a.png"]


def test_a_masks_folder_deleted_while_it_is_listed_reads_as_none(
    client: TestClient, dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_is_dir = type(dataset).is_dir

    def checked_then_deleted(self):
        found = real_is_dir(self)
        if self == dataset / "masks" and found:
            shutil.rmtree(self)  # removed between the check and the listing
        return found

    monkeypatch.setattr(type(dataset), "is_dir", checked_then_deleted)
    assert masks.mask_files(dataset) == {}


@pytest.mark.parametrize("kind", ["thumbnails", "alpha", "masks"])
def test_an_image_deleted_after_it_was_found_is_a_404_thumbnail(
    client: TestClient, dataset, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    real = thumbnail_routes.existing_image

    def found_then_deleted(folder, name):
        path = real(folder, name)
        path.unlink()
        return path

    monkeypatch.setattr(thumbnail_routes, "file_has_alpha", lambda path: True)
    monkeypatch.setattr(thumbnail_routes, "existing_image", found_then_deleted)
    answer = client.get(f"/api/datasets/set/{kind}/a.png")
    assert answer.status_code == 404, answer.text
