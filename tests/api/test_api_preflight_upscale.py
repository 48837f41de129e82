"""Issue 29 part 5 through the API: the preflight warns, naming the files, when images would be
upscaled by more than 2x; with no_upscale they get buckets of their own size and no warning."""

from __future__ import annotations

import io
from collections.abc import Callable

from fastapi.testclient import TestClient
from PIL import Image


def _png(side: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (side, side), "red").save(buf, format="PNG")
    return buf.getvalue()


def test_the_preflight_names_the_upscaled_files(client: TestClient, flux_config: Callable[..., dict]) -> None:
    sides = {"big.png": 160, "tiny40.png": 40, "tiny48.png": 48, "half.png": 64}
    files = [("f", (name, _png(side))) for name, side in sides.items()]
    assert client.post("/api/datasets/tiny/files", files=files).status_code == 201
    config = flux_config(data_dir="tiny", resolution=128, trigger_word="sks", output_name="up")
    report = client.post("/api/train/preflight", json={"config": config})
    assert report.status_code == 200, report.text
    dataset = report.json()["dataset"]
    assert dataset["buckets"] == {"128x128": 4}
    assert dataset["warnings"] == [
        "2 image(s) would be upscaled by more than 2x to fill their bucket: tiny40.png (3.2x), "
        "tiny48.png (2.7x); set no_upscale = true to train them at their own size, or use larger images"
    ]
    kept = client.post("/api/train/preflight", json={"config": {**config, "no_upscale": True}})
    assert kept.status_code == 200, kept.text
    assert kept.json()["dataset"]["buckets"] == {"32x32": 1, "48x48": 1, "64x64": 1, "128x128": 1}
    assert kept.json()["dataset"]["warnings"] == []
    assert kept.json()["config"]["no_upscale"] is True
