"""Hostile embedded ICC profiles on uploads (data/colour.py): a profile of 12 MB (a JPEG carries
up to ~16 MB in APP2 segments), one whose tag table is malformed, one claiming another colour
space than the pixels. Each is refused with a 400 naming the file and why, fast, the server
goes on; none is kept, and a good image uploads after them."""

from __future__ import annotations

import io
import struct
import time

from fastapi.testclient import TestClient
from PIL import Image, ImageCms

from lorastudio.data import colour
from lorastudio.settings import Settings

SRGB = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()


def _jpeg(icc: bytes | None) -> bytes:
    buf = io.BytesIO()
    extra = {"icc_profile": icc} if icc is not None else {}
    Image.new("RGB", (24, 16), (10, 200, 30)).save(buf, "JPEG", **extra)
    return buf.getvalue()


def _padded(size: int) -> bytes:
    """A valid sRGB profile padded to `size` bytes (its header's size says so)."""
    big = bytearray(SRGB + b"\0" * (size - len(SRGB)))
    big[0:4] = struct.pack(">I", len(big))
    return bytes(big)


def _bad_tags() -> bytes:
    """The sRGB profile with a tag table claiming a million tags pointing past its end."""
    bad = bytearray(SRGB)
    bad[128:132] = struct.pack(">I", 1_000_000)
    bad[132:144] = b"rXYZ" + struct.pack(">II", 2**31, 2**31)
    return bytes(bad)


def test_hostile_profiles_are_refused_fast_and_nothing_is_kept(client: TestClient) -> None:
    assert (
        client.post("/api/datasets/hostile/files", files=[("f", ("ok.jpg", _jpeg(None)))]).status_code == 201
    )
    grey = bytearray(SRGB)
    grey[16:20] = b"GRAY"  # an RGB profile claiming grey colours on RGB pixels
    for name, icc, why in (
        ("huge.jpg", _padded(12 * 2**20), "larger than"),
        ("tags.jpg", _bad_tags(), "cannot"),
        ("grey.jpg", bytes(grey), "cannot be converted"),
    ):
        start = time.process_time()  # this process's CPU, not the wall clock a loaded host stretches
        resp = client.post("/api/datasets/hostile/files", files=[("f", (name, _jpeg(icc)))])
        assert resp.status_code == 400, (name, resp.status_code, resp.text)
        assert name in resp.text and "colour profile" in resp.text and why in resp.text, resp.text
        # a hang guard, not a speed claim: a parse that walks a million tags runs for minutes
        assert time.process_time() - start < 30, name
    listed = [f["file"] for f in client.get("/api/datasets/hostile").json()["files"]]
    assert listed == ["ok.jpg"]
    assert (
        client.post("/api/datasets/hostile/files", files=[("f", ("b.jpg", _jpeg(SRGB)))]).status_code == 201
    )


def test_profiles_held_for_reuse_are_kept_by_digest_not_by_their_bytes() -> None:
    """The transforms kept built must not hold every distinct profile's bytes (32 of ~16 MB
    each would pin half a GB in the server)."""
    colour._BUILT.clear()
    for i in range(3):
        assert colour.profile_problem(Image.open(io.BytesIO(_jpeg(_padded(len(SRGB) + 1000 + i))))) is None
    assert len(colour._BUILT) == 3 and all(len(key) == 32 for key in colour._BUILT)


def test_a_hostile_profile_copied_into_a_dataset_has_its_thumbnail_refused(
    client: TestClient, settings: Settings
) -> None:
    folder = settings.datasets_dir / "copied"
    folder.mkdir(parents=True)
    (folder / "tags.jpg").write_bytes(_jpeg(_bad_tags()))
    (folder / "huge.jpg").write_bytes(_jpeg(_padded(12 * 2**20)))
    (folder / "ok.jpg").write_bytes(_jpeg(SRGB))
    detail = client.get("/api/datasets/copied")
    assert detail.status_code == 200
    # the listing reads headers only (the scan of a run refuses them, as an upload does)
    assert sorted(f["file"] for f in detail.json()["files"]) == ["huge.jpg", "ok.jpg", "tags.jpg"]
    for name in ("tags.jpg", "huge.jpg"):
        thumb = client.get(f"/api/datasets/copied/thumbnails/{name}")
        assert 400 <= thumb.status_code < 500, (name, thumb.status_code)
    assert client.get("/api/datasets/copied/thumbnails/ok.jpg").status_code == 200
