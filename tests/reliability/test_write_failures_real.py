"""A real `lorastudio serve` under `prlimit --fsize` (session 28 chaos audit, RELIABILITY 650):
its RLIMIT_FSIZE is set where the server process is made, so every write past 200 KB fails with
EFBIG as the kernel gives it (Python ignores SIGXFSZ). An upload of a larger image and a 512x512
generation answered a plain-text "Internal Server Error" and "generation failed: OSError: [Errno
27] File too large"; now both are WriteFailed (500, the JSON error body) naming the file and the
folder, nothing of either is left (no file, no staging, no sidecar), and the server goes on."""

from __future__ import annotations

import errno
import io
import resource
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from reliability_helpers import serve_process

from lorastudio.errors import WRITE_ADVICE
from lorastudio.settings import Settings

LIMIT = 200_000  # bytes a file of the server (and its workers) may reach


def _noise_png(side: int) -> bytes:
    pixels = (np.random.default_rng(0).random((side, side, 3)) * 255).astype("uint8")
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


@pytest.mark.slow
def test_a_server_past_its_file_size_limit_answers_write_failed_and_goes_on(
    settings: Settings, tiny_model, tmp_path: Path
) -> None:
    big = _noise_png(300)
    assert len(big) > LIMIT
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    with ExitStack() as stack:
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, hard))  # inherited by the server made now
        try:
            proc, client = stack.enter_context(serve_process(settings, client_timeout=180))
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        small = _noise_png(16)
        assert client.post("/api/datasets/pets/files", files=[("files", ("a.png", small))]).status_code == 201
        resp = client.post(
            "/api/datasets/pets/files", files=[("files", ("big.png", big)), ("files", ("big.txt", b"x"))]
        )
        assert resp.status_code == 500 and resp.headers["content-type"] == "application/json", resp.text
        assert resp.json() == {
            "error": "WriteFailed",
            "detail": "write failed: big.png of the upload to pets could not be stored "
            f"({settings.datasets_dir / 'pets'}): File too large; {WRITE_ADVICE[errno.EFBIG]}",
        }
        assert sorted(p.name for p in settings.datasets_dir.rglob("*") if ".locks" not in p.parts) == [
            "a.png",
            "pets",
        ]
        body = {"family": "flux", "base_model": str(tiny_model("flux")), "prompt": "noise", "steps": 1}
        gen = client.post("/api/generate", json={**body, "width": 512, "height": 512})
        assert gen.status_code == 500 and gen.json()["error"] == "WriteFailed", gen.text
        gallery = settings.home / "gallery"
        assert (
            gen.json()["detail"]
            == f"write failed: the image could not be written to the gallery ({gallery}): File too large; {WRITE_ADVICE[errno.EFBIG]}"
        )
        assert list(gallery.iterdir()) == []  # no image, staging or sidecar
        kept = client.post("/api/generate", json={**body, "width": 32, "height": 32})  # the server goes on
        assert kept.status_code == 201, kept.text
        assert sorted(p.suffix for p in gallery.iterdir()) == [".json", ".png"]
        assert proc.poll() is None
