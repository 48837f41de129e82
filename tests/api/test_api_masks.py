"""Issue 29 part 4 through the API: a dataset's masks/ folder is listed per image and served as
thumbnails (for the UI's overlay); the preflight states how many images have a mask, names those
without one, and names a mask of the wrong size."""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path

import pytest
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


def test_the_listing_opens_each_image_once(
    client: TestClient, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listing reads each image's size and alpha flag in one pass over its header: one open
    per image (PNG with and without alpha, palette with tRNS, WebP, JPEG), the flags right."""
    half = Image.new("RGBA", (64, 64), (255, 0, 0, 255))
    half.paste((0, 0, 0, 0), (0, 0, 32, 64))
    palette = half.convert("RGB").convert("P")
    encoded = {
        "rgba.png": (half, {"format": "PNG"}),
        "rgb.png": (half.convert("RGB"), {"format": "PNG"}),
        "p.png": (palette, {"format": "PNG", "transparency": 0}),
        "lossy.webp": (half, {"format": "WEBP", "quality": 80}),
        "lossless.webp": (half.convert("RGB"), {"format": "WEBP", "lossless": True}),
        "photo.jpg": (half.convert("RGB"), {"format": "JPEG"}),
    }
    files = []
    for name, (img, kw) in encoded.items():
        buf = io.BytesIO()
        img.save(buf, **kw)
        files.append(("f", (name, buf.getvalue())))
    assert client.post("/api/datasets/once/files", files=files).status_code == 201
    opened: list[str] = []
    real_open = os.open

    def counting_open(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        opened.append(os.fsdecode(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting_open)
    detail = client.get("/api/datasets/once").json()
    assert {f["file"]: f["alpha"] for f in detail["files"]} == {
        "rgba.png": True,
        "rgb.png": False,
        "p.png": True,
        "lossy.webp": True,
        "lossless.webp": False,
        "photo.jpg": False,
    }
    assert {f["file"]: (f["width"], f["height"]) for f in detail["files"]} == dict.fromkeys(encoded, (64, 64))
    assert sorted(n for n in opened if Path(n).name in encoded) == sorted(encoded)  # each once


def test_mask_settings_are_checked_over_every_dataset_entry(
    client: TestClient, settings: Settings, flux_config: Callable[..., dict]
) -> None:
    """unmasked_weight with several entries, one of them masked: accepted (each entry is checked
    for masks on its own, so the entry without a masks/ folder refused the whole run: "nothing is
    masked"); refused only when no entry has a mask. alpha_mask on images without an alpha
    channel masks nothing: refused naming the field, not silently ignored."""
    for name in ("masked", "plain"):
        files = [("f", (f"{name}{i}.png", _png((64, 64)))) for i in range(2)]
        assert client.post(f"/api/datasets/{name}/files", files=files).status_code == 201
    (settings.datasets_dir / "masked" / "masks").mkdir()
    Image.new("L", (64, 64), 128).save(settings.datasets_dir / "masked" / "masks" / "masked0.png")
    base = flux_config(resolution=64, trigger_word="sks", output_name="m", unmasked_weight=0.1)
    base.pop("data_dir", None)
    both = {**base, "datasets": [{"path": "masked"}, {"path": "plain"}]}
    report = client.post("/api/train/preflight", json={"config": both})
    assert report.status_code == 200, report.text
    assert report.json()["dataset"]["masks"] == {
        "source": "masks/ folder",
        "images_with_mask": 1,
        "without_mask": ["masked/masked1.png", "plain/plain0.png", "plain/plain1.png"],
    }
    plain = client.post("/api/train/preflight", json={"config": {**base, "datasets": [{"path": "plain"}]}})
    assert plain.status_code == 400
    assert [p["field"] for p in plain.json()["problems"]] == ["unmasked_weight"]
    alpha = {**base, "unmasked_weight": 0.0, "alpha_mask": True, "datasets": [{"path": "plain"}]}
    refused = client.post("/api/train/preflight", json={"config": alpha})
    assert refused.status_code == 400, refused.text
    assert [p["field"] for p in refused.json()["problems"]] == ["alpha_mask"]
    assert "has an alpha channel (nothing would be masked)" in refused.text


def test_masks_upload_into_masks_folder_checked_like_an_import(
    client: TestClient, settings: Settings
) -> None:
    """Form fields named `mask` store loss masks in masks/ (the CLI's `datasets import` took a
    masks/ folder while the upload refused "masks/a.png" as a name with '/': a web user could not
    add masks at all). Each is checked: an image of the dataset's stem and size; the bad ones are
    named; strict refuses all; masks mixed with images, or before any image, are refused."""
    early = client.post("/api/datasets/mk/files", files=[("mask", ("a.png", _png((64, 48), "L", 255)))])
    assert early.status_code == 400 and "upload the images first" in early.text
    images = [("f", ("a.png", _png((64, 48)))), ("f", ("b.png", _png((32, 32))))]
    assert client.post("/api/datasets/mk/files", files=images).status_code == 201
    masks = [
        ("mask", ("a.png", _png((64, 48), "L", 255))),  # good
        ("mask", ("b.png", _png((10, 10), "L", 255))),  # another size than b.png
        ("mask", ("zz.png", _png((32, 32), "L", 255))),  # no image zz
        ("mask", ("c.txt", b"not an image")),
    ]
    strict = client.post("/api/datasets/mk/files?strict=true", files=masks)
    assert strict.status_code == 400 and not (settings.datasets_dir / "mk" / "masks").exists()
    made = client.post("/api/datasets/mk/files", files=masks)
    assert made.status_code == 201, made.text
    out = made.json()
    assert out["committed"] == ["masks/a.png"]
    reasons = {r["file"]: r["reason"] for r in out["refused"]}
    assert reasons == {
        "masks/b.png": "10x10, but b.png is 32x32 (a mask must have its image's size)",
        "masks/c.txt": "not an image file",
        "masks/zz.png": "no image zz.* in the dataset",
    }
    assert sorted(p.name for p in (settings.datasets_dir / "mk" / "masks").iterdir()) == ["a.png"]
    detail = client.get("/api/datasets/mk").json()
    assert {f["file"]: f["mask"] for f in detail["files"]} == {"a.png": "a.png", "b.png": None}
    mixed = client.post(
        "/api/datasets/mk/files", files=[images[0], ("mask", ("b.png", _png((32, 32), "L", 0)))]
    )
    assert mixed.status_code == 400 and "an upload of their own" in mixed.text
    assert not list((settings.datasets_dir / ".uploads").glob("*"))  # no staging left behind


def test_deleting_an_image_deletes_its_mask(
    client: TestClient, settings: Settings, flux_config: Callable[..., dict]
) -> None:
    """The image delete took the image, its caption and its controls but left masks/a.png: the
    dataset then failed every run ("masks/a.png: no image named a.* in the dataset"), and no
    route could remove that mask. A mask shared with another image of the stem (a.jpg beside
    a.png) stays, like the caption."""
    files = [("f", (name, _png((64, 64)))) for name in ("a.png", "a.jpg", "b.png", "c.png")]
    assert client.post("/api/datasets/gone/files", files=files).status_code == 201
    masks = [("mask", (name, _png((64, 64), "L", 128))) for name in ("a.png", "b.png")]
    assert client.post("/api/datasets/gone/files", files=masks).status_code == 201
    folder = settings.datasets_dir / "gone"
    assert client.delete("/api/datasets/gone/images/a.png").json() == {"deleted": ["a.png"]}
    assert (folder / "masks" / "a.png").is_file()  # still a.jpg's
    assert client.delete("/api/datasets/gone/images/a.jpg").json() == {"deleted": ["a.jpg", "masks/a.png"]}
    assert client.delete("/api/datasets/gone/images/b.png").json() == {"deleted": ["b.png", "masks/b.png"]}
    assert sorted(p.name for p in folder.rglob("*")) == ["c.png", "masks"]
    config = flux_config(data_dir="gone", resolution=64, trigger_word="sks", output_name="g")
    report = client.post("/api/train/preflight", json={"config": config})
    assert report.status_code == 200, report.text
