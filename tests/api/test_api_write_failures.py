"""A write the file system refuses for another reason than a full disk (session 28 chaos audit):
the file-size limit (a real RLIMIT_FSIZE, as `prlimit --fsize`), a read-only folder, no
permission. Before: an upload past the limit answered Starlette's plain-text "Internal Server
Error" (500, a traceback in the log), a writer that did not wrap its write the same; the writers
turned only a full disk (ENOSPC) into a named error. Now every writer's failure is WriteFailed
(500) naming what and where (errors.writing), and an OSError no writer named reaches the client in
the error shape; nothing half-written is left under a real name, and the write can be redone."""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from file_limit import file_size_limit
from lorastudio.errors import WRITE_ADVICE, NoSpaceLeft, WriteFailed, writing
from lorastudio.settings import Settings

LIMIT = 64 * 1024  # bytes: the noise PNG below is ~190 KB


def _noise_png() -> bytes:
    pixels = (np.random.default_rng(0).random((256, 256, 3)) * 255).astype("uint8")
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    assert len(buf.getvalue()) > 2 * LIMIT
    return buf.getvalue()


def _hidden(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if p.name.startswith(".") and p.name != ".locks"
    )


def test_an_upload_past_the_file_size_limit_is_a_named_500_and_leaves_nothing(
    client: TestClient, settings: Settings
) -> None:
    small = client.post("/api/datasets/pets/files", files=[("files", ("a.png", _png_small()))])
    assert small.status_code == 201, small.text
    body = _noise_png()
    with file_size_limit(LIMIT):
        resp = client.post(
            "/api/datasets/pets/files", files=[("files", ("big.png", body)), ("files", ("big.txt", b"a cat"))]
        )
    assert resp.status_code == 500, resp.text
    got = resp.json()
    assert got["error"] == "WriteFailed", got
    declared = client.get("/openapi.json").json()["paths"]["/api/datasets/{name}/files"]["post"]["responses"]
    assert declared["500"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorOut")
    assert got["detail"] == (
        f"write failed: big.png of the upload to pets could not be stored ({settings.datasets_dir / 'pets'}): File too large; {WRITE_ADVICE[errno.EFBIG]}"
    )
    folder = settings.datasets_dir / "pets"
    assert sorted(p.name for p in folder.iterdir()) == ["a.png"]  # nothing of it, whole or half
    assert _hidden(settings.datasets_dir) == []  # no staging left to block or fill
    again = client.post(
        "/api/datasets/pets/files", files=[("files", ("big.png", body)), ("files", ("big.txt", b"a cat"))]
    )
    assert again.status_code == 201 and again.json()["committed"] == ["big.png", "big.txt"], again.text
    assert (folder / "big.png").read_bytes() == body


def _png_small() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 10, 10)).save(buf, format="PNG")
    return buf.getvalue()


def test_an_image_delete_refused_by_its_folder_is_answered_in_the_error_shape(
    client: TestClient, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only dataset folder (root writes through a chmod, so the kernel's answer is raised
    where it comes: the image's unlink) while an image is deleted: a 500 `WriteFailed` naming the
    image, the file refused and what to do, not a plain-text "Internal Server Error" (nor, since
    the surfaces audit, the backstop's "DELETE /api/datasets/pets/images/a.png")."""
    assert (
        client.post("/api/datasets/pets/files", files=[("files", ("a.png", _png_small()))]).status_code == 201
    )
    image = settings.datasets_dir / "pets" / "a.png"
    real = Path.unlink

    def read_only(self: Path, missing_ok: bool = False) -> None:
        if self == image:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        real(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", read_only)
    resp = client.delete("/api/datasets/pets/images/a.png")
    assert resp.status_code == 500 and resp.headers["content-type"] == "application/json", resp.text
    assert resp.json() == {
        "error": "WriteFailed",
        "detail": f"write failed: a.png of pets could not be deleted ({image.parent}): Read-only file system: {image}; "
        + WRITE_ADVICE[errno.EROFS],
    }
    monkeypatch.setattr(Path, "unlink", real)
    assert client.delete("/api/datasets/pets/images/a.png").status_code == 200  # redone once it can be
    assert not image.exists()


@pytest.mark.parametrize(
    ("code", "cls"),
    [(errno.EFBIG, WriteFailed), (errno.EROFS, WriteFailed), (errno.EACCES, WriteFailed), (errno.EPERM, WriteFailed),
     (errno.EIO, WriteFailed), (errno.ENOSPC, NoSpaceLeft), (errno.EDQUOT, NoSpaceLeft)],
)  # fmt: skip
def test_writing_names_every_write_failure_and_lets_the_rest_through(
    tmp_path: Path, code: int, cls: type
) -> None:
    with pytest.raises(cls) as err, writing("the caption of a.png could not be written", tmp_path / "a.txt"):
        raise OSError(code, os.strerror(code), str(tmp_path / ".a.txt.tmp"))
    assert "the caption of a.png could not be written" in str(err.value) and str(tmp_path / "a.txt") in str(
        err.value
    )
    assert isinstance(err.value.__cause__, OSError)
    with pytest.raises(FileNotFoundError), writing("x", tmp_path):  # a race its caller handles: unchanged
        raise FileNotFoundError(errno.ENOENT, "gone")


def test_a_bulk_caption_edit_whose_write_fails_changes_nothing_and_can_be_sent_again(
    client: TestClient, settings: Settings
) -> None:
    """A bulk prepend whose write fails at the third caption (a real RLIMIT_FSIZE below that
    caption's size): it had written the first two, so the edit sent again prepended twice to
    them. Now every caption is staged first: nothing changes, and the retry applies it once."""
    long = "a " + "very " * 300 + "long caption"  # ~1.5 KB, the rest are a few bytes
    files = [("files", (f"{s}.png", _png_small())) for s in "abcd"]
    files += [
        ("files", ("a.txt", b"a cat")),
        ("files", ("b.txt", b"a dog")),
        ("files", ("c.txt", long.encode())),
    ]
    files += [("files", ("metadata.jsonl", b'{"file_name": "d.png", "text": "a fox"}\n'))]
    assert client.post("/api/datasets/pets/files", files=files).status_code == 201
    folder = settings.datasets_dir / "pets"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with file_size_limit(1024):
        resp = client.post("/api/datasets/pets/captions", json={"prepend": "tok, "})
    assert resp.status_code == 500 and resp.json()["error"] == "WriteFailed", resp.text
    assert resp.json()["detail"].startswith(
        f"write failed: the captions of pets could not be written ({folder}): File too large"
    )
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # nothing changed, no staging
    again = client.post("/api/datasets/pets/captions", json={"prepend": "tok, "})
    assert again.status_code == 200, again.text
    assert (folder / "a.txt").read_text(encoding="utf-8") == "tok, a cat\n"
    assert (folder / "c.txt").read_text(encoding="utf-8") == f"tok, {long}\n"
    assert '"text": "tok, a fox"' in (folder / "metadata.jsonl").read_text(encoding="utf-8")
