"""A dataset's detail (data/dataset_detail.py, GET /api/datasets/{name}) while its files come and
go (RELIABILITY 182): never an error, each page sorted and without duplicates. Before, the
masks/ folder was listed twice per request (mask_files, then mask_clashes): two masks of one
stem added between the listings were a clash of a stem the first had not seen, a KeyError (500);
a live server paged while two threads added and removed masks answered 500 to 80 % of the pages."""

from __future__ import annotations

import contextlib
import io
import os
import random
import threading
from pathlib import Path

import pytest
from PIL import Image

from lorastudio.data import masks
from lorastudio.data.dataset_detail import dataset_detail


def _png(mode: str = "RGB") -> bytes:
    buf = io.BytesIO()
    Image.new(mode, (8, 8), 128).save(buf, format="PNG")
    return buf.getvalue()


def test_masks_added_between_two_listings_are_seen_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The masks/ folder as two successive listings see it: empty, then a clash of a.png's stem."""
    (tmp_path / "masks").mkdir()
    (tmp_path / "a.png").write_bytes(_png())
    listings = iter([[], ["a.png", "a.webp"]])
    monkeypatch.setattr(masks, "_mask_names", lambda root: next(listings, ["a.png", "a.webp"]))
    detail = dataset_detail(tmp_path)
    assert [f["file"] for f in detail["files"]] == ["a.png"] and detail["files"][0]["mask"] is None


@pytest.mark.slow
def test_pages_while_images_masks_captions_and_controls_churn(tmp_path: Path) -> None:
    folder = tmp_path / "set"
    for sub in ("masks", "control"):
        (folder / sub).mkdir(parents=True)
    image, mask = _png(), _png("L")
    for i in range(200):
        (folder / f"i{i:03d}.png").write_bytes(image)
    stop = threading.Event()

    def churn(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                _change(folder, f"i{rng.randrange(260):03d}", rng, image, mask)

    threads = [threading.Thread(target=churn, args=(seed,)) for seed in range(2)]
    for thread in threads:
        thread.start()
    try:
        rng = random.Random(7)
        for _ in range(300):
            detail = dataset_detail(folder, rng.randrange(250), 40)
            names = [f["file"] for f in detail["files"]]
            assert names == sorted(set(names)), names
            assert len(names) <= 40
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def _change(folder: Path, name: str, rng: random.Random, image: bytes, mask: bytes) -> None:
    """One random change of `folder` about the image `name`: added, removed, renamed, its masks
    (a clash: .png and .webp) added or removed, a control added, its caption added or removed."""
    kind = rng.randrange(8)
    if kind == 0:
        (folder / f"{name}.png").write_bytes(image)
    elif kind == 1:
        (folder / f"{name}.png").unlink()
    elif kind == 2:
        os.rename(folder / f"{name}.png", folder / f"i{rng.randrange(260):03d}.png")
    elif kind in (3, 4):
        for ext in ("png", "webp"):
            path = folder / "masks" / f"{name}.{ext}"
            path.write_bytes(mask) if kind == 3 else path.unlink()
    elif kind == 5:
        (folder / "control" / f"{name}.png").write_bytes(image)
    elif kind == 6:
        (folder / f"{name}.txt").write_text("a caption")
    else:
        (folder / f"{name}.txt").unlink()
