"""Issue 29 part 4 through the API: a dataset's masks/ folder is listed per image and served as
thumbnails (for the UI's overlay); the preflight states how many images have a mask, names those
without one, and names a mask of the wrong size."""

from __future__ import annotations

import io
from collections.abc import Callable

from fastapi.testclient import TestClient
from PIL import Image

from lorastudio.settings import Settings


def _png(size: tuple[int, int], mode: str = "RGB", color: object = "red") -> bytes:
    buf = io.BytesIO()
    Image.new(mode, size, color).save(buf, format="PNG")
    return buf.getvalue()


def test_masks_listed_served_and_stated_by_the_preflight(
    client: TestClient, settings: Settings, flux_config: Callable[..., dict]
) -> None:
    files = [("f", (name, _png((64, 64)))) for name in ("a.png", "b.png", "c.png")]
    assert client.post("/api/datasets/masked/files", files=files).status_code == 201
    masks = settings.datasets_dir / "masked" / "masks"
    masks.mkdir()
    Image.new("L", (64, 64), 255).save(masks / "a.png")
    Image.new("L", (64, 64), 0).save(masks / "b.png")

    detail = client.get("/api/datasets/masked").json()
    assert {f["file"]: f["mask"] for f in detail["files"]} == {
        "a.png": "a.png",
        "b.png": "b.png",
        "c.png": None,
    }
    assert detail["dropped"] == []  # the masks folder is used, not dropped
    thumb = client.get("/api/datasets/masked/masks/b.png?size=32")
    assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/jpeg"
    with Image.open(io.BytesIO(thumb.content)) as img:
        assert img.size == (32, 32) and max(img.convert("L").getdata()) < 10  # the black mask
    assert client.get("/api/datasets/masked/masks/c.png").status_code == 404
    assert client.get("/api/datasets/masked/masks/..%2Fa.png").status_code in (400, 404)

    config = flux_config(
        data_dir="masked", resolution=64, trigger_word="sks", output_name="m", unmasked_weight=0.1
    )
    report = client.post("/api/train/preflight", json={"config": config})
    assert report.status_code == 200, report.text
    dataset = report.json()["dataset"]
    assert dataset["masks"] == {"source": "masks/ folder", "images_with_mask": 2, "without_mask": ["c.png"]}
    assert "1 image(s) have no mask and train unmasked: c.png" in dataset["warnings"]

    Image.new("L", (32, 64), 255).save(masks / "c.png")
    wrong = client.post("/api/train/preflight", json={"config": config})
    assert wrong.status_code == 400
    assert "masks/c.png: 32x64, but c.png is 64x64 (a mask must have its image's size)" in wrong.text
    (masks / "c.png").unlink()
    for path in masks.iterdir():
        path.unlink()
    masks.rmdir()
    nothing = client.post("/api/train/preflight", json={"config": config})
    assert nothing.status_code == 400
    assert [p["field"] for p in nothing.json()["problems"]] == ["unmasked_weight"]


def test_an_image_s_alpha_channel_is_listed_and_served_as_its_mask(
    client: TestClient, settings: Settings
) -> None:
    """alpha_mask's masks: the listing says which images have an alpha channel and the alpha
    route serves that channel as a grey thumbnail (opaque = white), for the UI's overlay."""
    cut = Image.new("RGBA", (64, 64), (255, 0, 0, 255))
    cut.paste((0, 0, 0, 0), (0, 0, 32, 64))  # the left half transparent
    buf = io.BytesIO()
    cut.save(buf, format="PNG")
    files = [("f", ("cut.png", buf.getvalue())), ("f", ("plain.png", _png((64, 64))))]
    assert client.post("/api/datasets/alpha/files", files=files).status_code == 201

    detail = client.get("/api/datasets/alpha").json()
    assert {f["file"]: (f["alpha"], f["mask"]) for f in detail["files"]} == {
        "cut.png": (True, None),
        "plain.png": (False, None),
    }
    thumb = client.get("/api/datasets/alpha/alpha/cut.png?size=32")
    assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/jpeg"
    with Image.open(io.BytesIO(thumb.content)) as img:
        grey = img.convert("L")
        assert img.size == (32, 32) and grey.getpixel((4, 16)) < 10 and grey.getpixel((28, 16)) > 245
    image = client.get("/api/datasets/alpha/thumbnails/cut.png?size=32")  # the image's own: another
    assert image.status_code == 200 and image.content != thumb.content
    assert client.get("/api/datasets/alpha/alpha/plain.png").status_code == 404  # no alpha channel
    assert client.get("/api/datasets/alpha/alpha/none.png").status_code == 404
