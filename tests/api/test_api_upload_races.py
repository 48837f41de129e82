"""An upload whose dataset is renamed, deleted or replaced by another client while its body is
sent (RELIABILITY 770): refused (409 DatasetChanged) with nothing stored, never committed as a
new dataset under the old name. The interleaving is forced: the other client's change runs at
the moment the upload's body has been read (`file_parts`), before its commit."""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from lorastudio.api.routes import datasets as datasets_route
from lorastudio.data.dataset_delete import delete_dataset
from lorastudio.data.dataset_names import rename_dataset
from lorastudio.settings import Settings


def _png(shade: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (shade, 80, 160)).save(buf, format="PNG")
    return buf.getvalue()


def _files(stem: str) -> list:
    return [("files", (f"{stem}.png", _png(len(stem) * 20))), ("files", (f"{stem}.txt", stem.encode()))]


def _meanwhile(monkeypatch: pytest.MonkeyPatch, change: Callable[[], None]) -> None:
    """Run `change` once the upload's body is parsed, before its commit."""
    parts = datasets_route.file_parts

    def parsed(form):  # type: ignore[no-untyped-def]
        change()
        return parts(form)

    monkeypatch.setattr(datasets_route, "file_parts", parsed)


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".locks" not in p.parts)


def _replace(root: Path) -> None:
    """Another client deletes `pets` and uploads a new `pets` (another folder, same name)."""
    shutil.rmtree(root / "pets")
    (root / "pets").mkdir()


@pytest.mark.parametrize(
    "change",
    [
        lambda root: rename_dataset(root, "pets", "cats", in_use=set),
        lambda root: delete_dataset(root, "pets", in_use=set),
        _replace,
    ],
    ids=["renamed", "deleted", "replaced"],
)
def test_an_upload_into_a_dataset_changed_meanwhile_is_refused_whole(
    client: TestClient, settings: Settings, monkeypatch: pytest.MonkeyPatch, change: Callable[[Path], None]
) -> None:
    root = settings.datasets_dir
    assert client.post("/api/datasets/pets/files", files=_files("a") + _files("b")).status_code == 201
    seen: list[list[str]] = []
    _meanwhile(monkeypatch, lambda: (change(root), seen.append(_tree(root))))

    answer = client.post("/api/datasets/pets/files", files=_files("late"))

    assert answer.status_code == 409, answer.text
    assert answer.json()["error"] == "DatasetChanged"
    assert "'pets' was renamed, deleted or replaced while this upload was sent" in answer.json()["detail"]
    assert _tree(root) == seen[0]  # nothing stored, no dataset made under the old name, no staging
    assert not any(name.endswith("late.png") for name in seen[0])


def test_an_upload_that_makes_a_dataset_another_made_meanwhile_adds_to_it(
    client: TestClient, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two uploads making one new dataset at once: the later one adds to it (as sequential
    uploads accumulate); only a dataset that existed when the upload began is checked."""
    _meanwhile(monkeypatch, lambda: os.mkdir(settings.datasets_dir / "fresh"))

    answer = client.post("/api/datasets/fresh/files", files=_files("a"))

    assert answer.status_code == 201, answer.text
    assert sorted(p.name for p in (settings.datasets_dir / "fresh").iterdir()) == ["a.png", "a.txt"]
