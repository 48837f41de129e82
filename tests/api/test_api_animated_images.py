"""Animated images (an APNG, an animated WebP: more than one frame) are refused wherever an image
comes in, naming the file and its frame count, like a corrupt or oversized one
(data/images.probe_image): an upload refuses the file (and its caption), the preflight of a
folder that already holds one refuses the run naming it (as a corrupt image), a reference
upload refuses it. Before, training took the first frame without a
word (the header walk hid an APNG's animation chunks from Pillow; a WebP opened on frame 0).
A GIF was never an accepted image; a one-frame APNG and a phone's multi-picture JPEG (MPO: a
preview, not frames) stay accepted."""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from lorastudio.data.images import probe_image
from lorastudio.errors import DatasetError
from lorastudio.settings import Settings

COLOURS = ("red", "green", "blue")


def _image(fmt: str, frames: int, size: int = 32) -> bytes:
    """An image of `frames` frames in format `fmt` (PNG writes an APNG when frames > 1)."""
    shots = [Image.new("RGB", (size, size), COLOURS[i % 3]) for i in range(frames)]
    buf = io.BytesIO()
    if frames > 1 or fmt == "MPO":
        shots[0].save(buf, format=fmt, save_all=True, append_images=shots[1:], duration=100, loop=0)
    else:
        shots[0].save(buf, format=fmt)
    return buf.getvalue()


def _chunk(kind: bytes, *fields: int) -> bytes:
    """A PNG chunk of 32-bit fields (an fcTL's last 6 bytes: delays and ops, left 0)."""
    data = b"".join(struct.pack(">I", f) for f in fields)
    if kind == b"fcTL":
        data = data.ljust(26, b"\0")
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _reason(fmt: str, frames: int) -> str:
    return (
        f"animated {fmt} of {frames} frames: only still images are used (training would take the "
        "first frame); save the frame you want as a still image"
    )


@pytest.mark.parametrize(
    ("fmt", "name", "frames", "shown"),
    [("WEBP", "a.webp", 3, "WebP"), ("PNG", "a.png", 2, "PNG (APNG)")],
)
def test_probe_refuses_an_animated_image_naming_its_frames(
    tmp_path: Path, fmt: str, name: str, frames: int, shown: str
) -> None:
    path = tmp_path / name
    path.write_bytes(_image(fmt, frames))
    with pytest.raises(DatasetError) as info:
        probe_image(path, 10**8)
    assert info.value.problems == [f"{name}: {_reason(shown, frames)}"]


def test_still_images_a_one_frame_apng_and_an_mpo_are_accepted(tmp_path: Path) -> None:
    still = _image("PNG", 1)
    one = tmp_path / "one.png"  # an APNG of 1 frame: its default image, the animation's only frame
    one.write_bytes(still[:33] + _chunk(b"acTL", 1, 0) + _chunk(b"fcTL", 0, 32, 32, 0, 0, 1) + still[33:])
    hidden = tmp_path / "hidden.png"  # 1 animation frame and a default image outside the animation
    hidden.write_bytes(still[:33] + _chunk(b"acTL", 1, 0) + still[33:])
    for path, frames in ((one, 1), (hidden, 2)):
        with Image.open(path) as img:
            assert img.n_frames == frames  # as Pillow counts them
    with pytest.raises(DatasetError, match="animated PNG"):
        probe_image(hidden, 10**8)
    mpo = tmp_path / "phone.jpg"
    mpo.write_bytes(_image("MPO", 2))
    with Image.open(mpo) as img:
        assert img.format == "MPO" and img.n_frames == 2
    webp = tmp_path / "s.webp"
    webp.write_bytes(_image("WEBP", 1))
    for path in (one, mpo, webp):
        assert probe_image(path, 10**8).width == 32


def test_an_upload_refuses_animated_images_and_their_captions(client: TestClient, settings: Settings) -> None:
    files = [
        ("files", ("anim.webp", _image("WEBP", 3))),
        ("files", ("anim.txt", b"a moving square")),
        ("files", ("apng.png", _image("PNG", 4))),
        ("files", ("still.png", _image("PNG", 1))),
        ("files", ("loop.gif", _image("GIF", 3))),
    ]
    resp = client.post("/api/datasets/moving/files", files=files)
    assert resp.status_code == 201, resp.text
    assert resp.json()["committed"] == ["still.png"]
    assert resp.json()["refused"] == [
        {"file": "anim.txt", "reason": "its image anim.webp was refused"},
        {"file": "anim.webp", "reason": _reason("WebP", 3)},
        {"file": "apng.png", "reason": _reason("PNG (APNG)", 4)},
        {"file": "loop.gif", "reason": "a GIF image: not read; convert it to PNG, JPEG or WebP"},  # fix 1001
    ]
    assert sorted(p.name for p in (settings.datasets_dir / "moving").iterdir()) == ["still.png"]
    refs = client.post("/api/generate/references", files=[("f", ("r.webp", _image("WEBP", 2)))])
    assert refs.status_code == 400, refs.text
    assert refs.json()["problems"] == [f"r.webp: {_reason('WebP', 2)}"]


def test_the_preflight_names_animated_images_already_in_a_folder(
    client: TestClient, settings: Settings, flux_config: Callable[..., dict]
) -> None:
    """Copied into the folder by hand: the run is refused naming it, as for a corrupt image."""
    folder = settings.datasets_dir / "handmade"
    folder.mkdir(parents=True)
    for i in range(3):
        (folder / f"s{i}.png").write_bytes(_image("PNG", 1))
        (folder / f"s{i}.txt").write_text(f"a square {i}")
    (folder / "anim.webp").write_bytes(_image("WEBP", 3))
    (folder / "anim.txt").write_text("a moving square")
    refused = client.post("/api/train/preflight", json={"config": flux_config(data_dir="handmade")})
    assert refused.status_code == 400, refused.text
    assert f"anim.webp: {_reason('WebP', 3)}" in refused.text
    (folder / "anim.webp").unlink()
    (folder / "anim.txt").unlink()
    ok = client.post("/api/train/preflight", json={"config": flux_config(data_dir="handmade")})
    assert ok.status_code == 200, ok.text
    assert ok.json()["dataset"]["images_used"] == 3
