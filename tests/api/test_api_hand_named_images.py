"""Images copied into a dataset by hand under names the studio would not create (RELIABILITY 183):
the listing shows them and a run trains on them, so their thumbnails, caption edits and deletes
must reach them. Before, every per-image route validated the name with the rules for names it
creates (safe_component) and looked the file up in NFC: a name over 100 characters or holding
one of " ? * : < > | was a 400, and a name in NFD (a folder copied from macOS) a 404, or, beside
its NFC twin, the twin's thumbnail and caption. A path out of the folder is still refused."""

from __future__ import annotations

import io
import unicodedata
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from lorastudio.settings import Settings

NFD = unicodedata.normalize("NFD", "café")
NAMES = [
    'a "quoted" what?.png',
    "star*colon:pipe|angle<>.png",
    "x" * 150 + ".png",
    "é" * 120 + ".png",  # 240 bytes: the caption's staging name would be over 255
    f"{NFD} only.png",
    "-leading dash.png",
    "CON.png",
]


def _png(colour: str) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), colour).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def hand_made(settings: Settings) -> Path:
    folder = settings.datasets_dir / "hand"
    folder.mkdir(parents=True)
    for name in NAMES:
        (folder / name).write_bytes(_png("red"))
    (folder / f"{NFD}.png").write_bytes(_png("blue"))  # NFD and NFC twins: two images
    (folder / "café.png").write_bytes(_png("green"))
    return folder


def test_each_listed_image_is_reachable_by_its_listed_name(client: TestClient, hand_made: Path) -> None:
    listed = [f["file"] for f in client.get("/api/datasets/hand").json()["files"]]
    assert sorted(listed) == sorted([*NAMES, f"{NFD}.png", "café.png"])
    for name in listed:
        url = f"/api/datasets/hand/thumbnails/{quote(name, safe='')}"
        answer = client.get(url, params={"size": 16})
        assert answer.status_code == 200, (name, answer.text)
        colour = Image.open(io.BytesIO(answer.content)).convert("RGB").getpixel((8, 8))
        expected = {f"{NFD}.png": (0, 0, 255), "café.png": (0, 128, 0)}.get(name, (255, 0, 0))
        assert all(abs(a - b) < 40 for a, b in zip(colour, expected, strict=True)), (name, colour)
        put = client.put(
            f"/api/datasets/hand/captions/{quote(name, safe='')}", json={"caption": f"c {len(name)}"}
        )
        assert put.status_code == 200, (name, put.text)
        assert (hand_made / put.json()["caption_file"]).read_text() == f"c {len(name)}\n"
    files = {f["file"]: f["caption"] for f in client.get("/api/datasets/hand").json()["files"]}
    assert files == {name: f"c {len(name)}" for name in listed}  # each its own caption
    for name in listed:
        gone = client.delete(f"/api/datasets/hand/images/{quote(name, safe='')}")
        assert gone.status_code == 200 and name in gone.json()["deleted"], (name, gone.text)
    assert [p.name for p in hand_made.iterdir()] == []


@pytest.mark.parametrize("name", ["%2e%2e", "%2e", "a%2Fb.png", "..%2F..%2Fx.png", "a%5Cb.png", "a%00.png"])
def test_a_path_out_of_the_folder_is_still_refused(client: TestClient, hand_made: Path, name: str) -> None:
    for url in (f"/api/datasets/hand/thumbnails/{name}", f"/api/datasets/hand/captions/{name}"):
        answer = client.get(url) if "thumbnails" in url else client.put(url, json={"caption": "x"})
        assert 400 <= answer.status_code < 500, (url, answer.status_code)
