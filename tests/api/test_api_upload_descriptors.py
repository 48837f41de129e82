"""An upload of many files holds no descriptor per file (api/upload_spool.py). starlette spooled
each file past 1 MiB into an open temporary file until the upload was stored: 300 photos of a few
MB under `ulimit -n 256` (1,024, a common default, for ~1,000 photos) answered 500 "Too many open
files: /tmp/tmpXXXX". Here the spool's threshold is lowered to 1 KiB (for starlette's parser as
for ours) so that 120 small files each go to disk, under a descriptor limit 40 above what the
test process has open."""

from __future__ import annotations

import io
import os
import random
import resource
import tempfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image
from starlette.formparsers import MultiPartParser


def _png(i: int) -> bytes:
    buf = io.BytesIO()
    Image.frombytes("RGB", (24, 24), random.Random(i).randbytes(24 * 24 * 3)).save(buf, "PNG")  # ~1.8 KB
    return buf.getvalue()


def test_an_upload_of_many_spooled_files_fits_a_low_descriptor_limit(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(MultiPartParser, "spool_max_size", 1024)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the spools go: counted below
    files = [("files", (f"img_{i:03d}.png", _png(i))) for i in range(120)]
    files += [("files", (f"img_{i:03d}.txt", f"picture {i} é".encode())) for i in range(120)]
    assert all(len(body) > 1024 for _, (name, body) in files if name.endswith(".png"))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 40, hard))
    try:
        answer = client.post("/api/datasets/many/files", files=files)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert answer.status_code == 201, answer.text
    assert answer.json()["images"] == 120 and answer.json()["captions"] == 120
    stored = client.app.state.settings.datasets_dir / "many"  # type: ignore[attr-defined]
    assert (stored / "img_077.png").read_bytes() == files[77][1][1]
    assert (stored / "img_077.txt").read_text(encoding="utf-8") == "picture 77 é"
    assert list(tmp_path.glob("lorastudio-upload-*")) == []  # each spool removed with the form


def test_a_spool_that_cannot_be_written_names_the_temporary_folder(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A full TMPDIR (here the file-size limit: the same path) answered 507 / 500 "a file this
    request changes could not be written" with a traceback in the log: the dataset's disk was
    blamed. Now the error names the temporary folder."""
    monkeypatch.setattr(MultiPartParser, "spool_max_size", 1024)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1500, hard))  # Python ignores SIGXFSZ: EFBIG
    try:
        answer = client.post("/api/datasets/tmpfull/files", files=[("files", ("a.png", _png(1)))])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert answer.status_code == 500, answer.text
    detail = answer.json()["detail"]
    assert detail.startswith(
        "write failed: an uploaded file's temporary copy in the temporary folder (TMPDIR)"
    )
    assert "File too large" in detail and list(tmp_path.iterdir()) == []
