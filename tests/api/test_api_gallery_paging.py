"""GET /api/gallery pages (`limit`, `cursor`: newest first, `total`) and reads each sidecar once
per file version: a gallery of 300 images (tiny PNGs + sidecars written directly) is walked page
by page; a second walk opens no sidecar, a sidecar edited or deleted by hand is seen; an image
made between two pages is neither repeated nor makes one skipped."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from lorastudio.jobs.gallery import new_image_name
from lorastudio.settings import Settings

N = 300
BASE_NS = 1_700_000_000_000_000_000


def _png_bytes() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (4, 4), "red").save(buf, format="PNG")
    return buf.getvalue()


def _image(folder: Path, i: int, png: bytes, ns: int | None = None) -> str:
    """Image i (a sidecar then the PNG, as a generation writes them), made at BASE_NS + i ms."""
    stem = f"img{i:04d}"
    (folder / f"{stem}.json").write_text(json.dumps({"prompt": f"prompt {i}", "seed": i}))
    (folder / f"{stem}.png").write_bytes(png)
    at = ns if ns is not None else BASE_NS + i * 1_000_000
    os.utime(folder / f"{stem}.png", ns=(at, at))
    return f"{stem}.png"


@pytest.fixture
def gallery(settings: Settings) -> Path:
    folder = settings.home / "gallery"
    folder.mkdir(parents=True)
    png = _png_bytes()
    for i in range(N):
        _image(folder, i, png)
    return folder


def _walk(client: TestClient, limit: int) -> list[dict[str, Any]]:
    images: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": limit}
    while True:
        answer = client.get("/api/gallery", params=params)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["total"] == N
        images += body["images"]
        if body["next_cursor"] is None:
            return images
        params = {"limit": limit, "cursor": body["next_cursor"]}


def _count_sidecar_opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    opened: list[str] = []
    real_open = os.open

    def counting(path: Any, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith(".json"):
            opened.append(os.path.basename(str(path)))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting)
    return opened


def test_a_second_listing_opens_no_sidecar_and_sees_hand_edits(
    gallery: Path, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _walk(client, limit=70)
    assert [i["file"] for i in first] == [f"img{i:04d}.png" for i in reversed(range(N))]
    assert [i["prompt"] for i in first[:2]] == ["prompt 299", "prompt 298"]
    opened = _count_sidecar_opens(monkeypatch)
    assert _walk(client, limit=70) == first
    assert client.get("/api/gallery").json()["images"] == first[:60]  # the default page
    assert opened == []  # nothing changed: no sidecar read again
    (gallery / "img0299.json").write_text(json.dumps({"prompt": "edited by hand, longer", "seed": 5}))
    (gallery / "img0298.json").unlink()
    again = _walk(client, limit=70)
    assert opened == ["img0299.json"]  # only the new version is read; the deleted one is not opened
    assert (again[0]["prompt"], again[0]["seed"]) == ("edited by hand, longer", 5)
    assert again[1]["file"] == "img0298.png" and again[1]["prompt"] is None
    assert again[2:] == first[2:]


def test_a_page_boundary_holds_while_an_image_is_made(gallery: Path, client: TestClient) -> None:
    page1 = client.get("/api/gallery", params={"limit": 100}).json()
    assert (len(page1["images"]), page1["total"]) == (100, N)
    made = _image(gallery, N, _png_bytes())  # a generation ends between two pages
    page2 = client.get("/api/gallery", params={"limit": 100, "cursor": page1["next_cursor"]}).json()
    (gallery / "img0050.png").unlink()  # and an image of the next page is deleted
    page3 = client.get("/api/gallery", params={"limit": 100, "cursor": page2["next_cursor"]}).json()
    assert page2["total"] == N + 1 and page3["total"] == N
    walked = [i["file"] for p in (page1, page2, page3) for i in p["images"]]
    assert walked == [f"img{i:04d}.png" for i in reversed(range(N)) if i != 50]  # none repeated or skipped
    assert page3["next_cursor"] is None  # the last page
    assert client.get("/api/gallery", params={"limit": 1}).json()["images"][0]["file"] == made


@pytest.mark.parametrize(
    "params",
    [{"limit": 0}, {"limit": 1001}, {"cursor": "x"}, {"cursor": "12:a/b.png"}, {"offset": 3}],
)
def test_a_bad_page_is_refused(client: TestClient, params: dict[str, Any]) -> None:
    assert client.get("/api/gallery", params=params).status_code == 422


def test_the_studio_orders_its_images_by_number_not_mtime(settings: Settings, client: TestClient) -> None:
    """RELIABILITY 930: images made after the clock was set back an hour (mtimes an hour older)
    list above the ones before; images of a gallery made before the numbering (an upgraded home)
    still list, below the numbered ones, by mtime; paging crosses from the one kind to the other."""
    folder = settings.home / "gallery"
    folder.mkdir(parents=True)
    png = _png_bytes()
    old = [_image(folder, i, png) for i in range(3)]  # an upgraded home's images
    first, second = new_image_name(settings, 7), new_image_name(settings, 7)  # two requests in flight
    assert first.split("_")[0] == "000001" and second.split("_")[0] == "000002"
    made = []
    for i, name in enumerate((first, second, new_image_name(settings, 8))):
        (folder / name).write_bytes(png)
        at = BASE_NS + (10 - 3600 * 1000 * i) * 1_000_000  # the clock set back an hour at each image
        os.utime(folder / name, ns=(at, at))
        made.append(name)
    assert new_image_name(settings, 9).startswith("000004_")
    listed = [i["file"] for i in _walk_files(client, limit=2)]
    assert listed == [*reversed(made), *reversed(old)]


def _walk_files(client: TestClient, limit: int) -> list[dict[str, Any]]:
    images: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": limit}
    while True:
        body = client.get("/api/gallery", params=params).json()
        images += body["images"]
        if body["next_cursor"] is None:
            return images
        params = {"limit": limit, "cursor": body["next_cursor"]}
