"""The dataset page's size of a photo whose orientation orientation.header_has_exif did not see
while training (Pillow's getexif) turned it upright; the listing showed its stored, landscape
size. A JPEG whose EXIF stands after its frame header (RELIABILITY 1102): the walk stopped at the
frame header (SOF), but Pillow's header-only open reads every segment up to the first scan (SOS),
where T.81 lets APPn segments stand too. A JPEG or WebP whose orientation is in its XMP alone
(RELIABILITY 1104): Pillow's getexif takes XMP's tiff:Orientation where the EXIF has none."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest
from PIL import Image

from lorastudio.data.dataset_detail import dataset_detail
from lorastudio.data.images import file_orientation, load_rgb
from lorastudio.data.orientation import header_has_exif


def _segments(jpeg: bytes) -> tuple[list[bytes], bytes]:
    """A baseline JPEG's segments after SOI, up to and with SOS, and the rest (scan data, EOI)."""
    out, i = [], 2
    while True:
        (length,) = struct.unpack(">H", jpeg[i + 2 : i + 4])
        out.append(jpeg[i : i + 2 + length])
        i += 2 + length
        if out[-1][1] == 0xDA:
            return out, jpeg[i:]


def test_an_exif_segment_after_the_frame_header_is_found_as_pillow_finds_it(tmp_path: Path) -> None:
    """Was: header_has_exif False, the listing 80x40 (stored), training 40x80 (orientation 6)."""
    exif = Image.Exif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    Image.new("RGB", (80, 40), "red").save(buf, "JPEG", exif=exif.tobytes())
    segments, rest = _segments(buf.getvalue())
    app1 = next(s for s in segments if s[1] == 0xE1)
    others = [s for s in segments if s[1] != 0xE1]
    assert others[-2][1] not in (0xC0, 0xDA) and any(s[1] == 0xC0 for s in others)  # tables after SOF
    folder = tmp_path / "ds"
    folder.mkdir()
    path = folder / "late.jpg"
    path.write_bytes(b"\xff\xd8" + b"".join(others[:-1]) + app1 + others[-1] + rest)  # SOF ... APP1, SOS
    assert file_orientation(path) == 6  # Pillow reads it there: training turns the image upright
    with open(path, "rb") as fh:
        assert header_has_exif(fh)
    (row,) = dataset_detail(folder)["files"]
    assert (row["width"], row["height"]) == (40, 80), row


XMP = (
    b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
    b'<rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/" tiff:Orientation="6"/></rdf:RDF></x:xmpmeta>'
)


def test_an_orientation_in_xmp_alone_is_listed_as_training_reads_it(tmp_path: Path) -> None:
    """Was: header_has_exif False for both, the listing 80x40, training 40x80."""
    folder = tmp_path / "ds"
    folder.mkdir()
    for name in ("x.jpg", "x.webp"):
        Image.new("RGB", (80, 40), "red").save(folder / name, xmp=XMP)
        assert file_orientation(folder / name) == 6, name  # Pillow's getexif: XMP's tiff:Orientation
    assert {f["file"]: (f["width"], f["height"]) for f in dataset_detail(folder)["files"]} == {
        "x.jpg": (40, 80),
        "x.webp": (40, 80),
    }


def test_an_orientation_in_xmp_alone_is_read_where_pillow_getexif_leaves_it_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pillow 11.0-11.1 (pyproject's floor is 11): getexif read only a PNG's XMP, so a JPEG or WebP
    whose orientation is in its XMP alone trained sideways and was listed so (RELIABILITY 1470).
    Its getexif is stood in for here, on any Pillow."""
    monkeypatch.setattr(Image.Image, "getexif", lambda self: Image.Exif())  # no XMP read
    for name in ("x.jpg", "x.webp"):
        Image.new("RGB", (80, 40), "red").save(tmp_path / name, xmp=XMP)
        assert file_orientation(tmp_path / name) == 6, name
        assert load_rgb(tmp_path / name).size == (40, 80), name
