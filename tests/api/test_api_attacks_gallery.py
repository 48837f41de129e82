"""Attacks on the gallery (GET /api/gallery, DELETE /api/gallery/<file>): a sidecar that is a
FIFO (a read would block the listing for ever), a link to a file elsewhere (its content would be
shown), one of 20 MB (read whole on every listing); names that reach outside the gallery
(encoded dot segments, backslashes, NUL, absolute paths) and hard links. The listing answers
at once with such an image's own fields only; a delete removes only the gallery's own names."""

from __future__ import annotations

import contextlib
import io
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fastapi.testclient import TestClient
from PIL import Image

from lorastudio.settings import Settings


def _png(path: Path) -> None:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), "blue").save(buf, format="PNG")
    path.write_bytes(buf.getvalue())


def test_a_sidecar_that_is_a_fifo_a_link_or_huge_is_not_read(
    settings: Settings, client: TestClient, tmp_path: Path
) -> None:
    gallery = settings.home / "gallery"
    gallery.mkdir(parents=True)
    for stem in ("fifo", "link", "huge", "good"):
        _png(gallery / f"{stem}.png")
    os.mkfifo(gallery / "fifo.json")
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"prompt": "another user's secret prompt"}))
    (gallery / "link.json").symlink_to(secret)
    (gallery / "huge.json").write_text(json.dumps({"prompt": "x" * (20 * 2**20)}))
    (gallery / "good.json").write_text(json.dumps({"prompt": "a good prompt", "seed": 3}))
    with ThreadPoolExecutor(1) as pool:
        listing = pool.submit(client.get, "/api/gallery")
        try:
            resp = listing.result(timeout=10)
        finally:  # unblock a reader stuck on the FIFO, whatever happened
            with contextlib.suppress(OSError):
                os.close(os.open(gallery / "fifo.json", os.O_WRONLY | os.O_NONBLOCK))
    assert resp.status_code == 200
    prompts = {i["file"]: i.get("prompt") for i in resp.json()["images"]}
    assert prompts == {"fifo.png": None, "link.png": None, "huge.png": None, "good.png": "a good prompt"}


def test_a_delete_never_reaches_outside_the_gallery(
    settings: Settings, client: TestClient, tmp_path: Path
) -> None:
    gallery = settings.home / "gallery"
    gallery.mkdir(parents=True)
    outside = tmp_path / "outside.png"
    _png(outside)
    (settings.home / "x.png").write_bytes(outside.read_bytes())
    os.link(outside, gallery / "hard.png")  # a hard link: the gallery's name goes, the file stays
    (gallery / "hard.json").symlink_to(tmp_path / "outside.json")
    (tmp_path / "outside.json").write_text("{}")
    for name in (
        "..%2Fx.png",
        "%2E%2E%2Fx.png",
        "..%5Cx.png",
        "x.png%00",
        "%00",
        "%2Fetc%2Fpasswd",
        "..",
        ".",
    ):
        resp = client.delete(f"/api/gallery/{name}")
        assert resp.status_code in (400, 404, 405), (name, resp.status_code)
    assert (settings.home / "x.png").is_file()
    gone = client.delete("/api/gallery/hard.png")
    assert gone.json() == {"deleted": ["hard.png"]}, gone.text  # the linked sidecar is not followed
    assert outside.is_file() and (tmp_path / "outside.json").read_text() == "{}"
    assert sorted(p.name for p in gallery.iterdir()) == ["hard.json"]
