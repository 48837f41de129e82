"""Images whose header is fine but whose pixels do not decode (RELIABILITY 151, 165): noise
images and PNGs whose chunks and CRCs are valid but whose deflate stream is damaged."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lorastudio.data import images


def noisy(fmt: str, size: int = 48, seed: int = 0) -> bytes:
    """An image of noise (so its compressed data spans the file) in `fmt`."""
    pixels = np.random.default_rng(seed).integers(0, 255, (size, size, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt)
    return buf.getvalue()


def chunks_of(png: bytes) -> list[tuple[bytes, bytes]]:
    """The (type, data) of each chunk of `png`."""
    out, pos = [], 8
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos : pos + 8])
        out.append((kind, png[pos + 8 : pos + 8 + length]))
        pos += 12 + length
    return out


def png_of(chunks: list[tuple[bytes, bytes]]) -> bytes:
    """A PNG of `chunks`, every CRC valid."""
    body = b"".join(
        struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        for kind, data in chunks
    )
    return b"\x89PNG\r\n\x1a\n" + body


def idat_cut_short(size: int = 48) -> bytes:
    """Valid chunks and CRCs, but the deflate stream holds half of the image's rows."""
    chunks = chunks_of(noisy("PNG", size))
    data = b"".join(d for k, d in chunks if k == b"IDAT")
    rest = [(k, d) for k, d in chunks if k != b"IDAT"]
    return png_of([rest[0], (b"IDAT", data[: len(data) // 2]), *rest[1:]])


def idat_ends_early(size: int = 48) -> bytes:
    """Valid chunks and CRCs and a deflate stream that ends cleanly (its final block, its
    checksum) after the first half of the rows: Pillow decodes it without a word, the rows it
    lacks black; only the full check (data/png_stream.py) sees the stream is short."""
    png = noisy("PNG", size)
    chunks = chunks_of(png)
    raw = zlib.decompress(b"".join(d for k, d in chunks if k == b"IDAT"))
    rest = [(k, d) for k, d in chunks if k != b"IDAT"]
    return png_of([rest[0], (b"IDAT", zlib.compress(raw[: len(raw) // 2])), *rest[1:]])


def record_full_decodes(monkeypatch: pytest.MonkeyPatch, *, with_folder: bool = False) -> list[str]:
    """The files whose every pixel the process decodes from now on (images._full_decode), in
    order: each as its name, or as folder/name with `with_folder`."""
    seen: list[str] = []
    real = images._full_decode

    def counted(path: Path, *args: object) -> bool:
        seen.append(f"{path.parent.name}/{path.name}" if with_folder else path.name)
        return real(path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(images, "_full_decode", counted)
    return seen


def train_check_output(raw: dict, folder: Path, ok: bool = True) -> str:
    """Output of `lorastudio train --check` (the job service's checks, as the API's preflight) of
    the config `raw`, written to `folder`/run.json; `ok`: its exit code 0 is asserted."""
    import json

    from typer.testing import CliRunner

    from lorastudio.cli.app import _register, app

    if not app.registered_commands:
        _register()
    config = folder / "run.json"
    config.write_text(json.dumps(raw))
    result = CliRunner().invoke(app, ["train", str(config), "--check", "--device", "cpu"])
    if ok:
        assert result.exit_code == 0, result.output
    return result.output


def webp(size: int = 32, seed: int = 0, truncated: bool = False) -> bytes:
    """A `size` px noise WebP; `truncated`: its VP8 chunk holds half its data, the RIFF and chunk
    sizes saying so (the header check passes it; its decode fails)."""
    pixels = np.random.default_rng(seed).integers(0, 255, (size, size, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="WEBP")
    data = buf.getvalue()
    if not truncated:
        return data
    kind, length = data[12:16], struct.unpack("<I", data[16:20])[0]
    half = data[20 : 20 + length // 2]
    half += b"\0" * (len(half) % 2)
    return b"RIFF" + struct.pack("<I", 12 + len(half)) + b"WEBP" + kind + struct.pack("<I", len(half)) + half
