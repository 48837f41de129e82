"""A failed write as a user reads it (session 28 surfaces audit, RELIABILITY 755-757): which file or
dataset, why, and what to do; never the request's method and route, nor a writer's hidden staging
file. Before: a dataset delete refused by its folder answered "write failed: DELETE
/api/datasets/pets (...)" (the API's backstop, no writer named it); a caption edit refused by a
read-only folder ended with the staging file's name (".../.a.txt.<hex>.tmp"); no message said
what to do about "File too large" or "Operation not permitted"."""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from PIL import Image

from lorastudio.api.errors import install_error_handlers
from lorastudio.data import dataset_delete
from lorastudio.errors import WRITE_ADVICE, WRITE_FAILED_ERRNOS, WriteFailed, writing
from lorastudio.settings import Settings


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 30, 30)).save(buf, format="PNG")
    return buf.getvalue()


def test_a_dataset_delete_its_folder_refuses_names_the_dataset_and_what_to_do(
    client: TestClient, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert client.post("/api/datasets/pets/files", files=[("files", ("a.png", _png()))]).status_code == 201
    folder = settings.datasets_dir / "pets"
    real = os.rename

    def refused(src: object, dst: object) -> None:
        if Path(os.fsdecode(src)) == folder:
            raise OSError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(src), os.fsdecode(dst))
        real(src, dst)

    monkeypatch.setattr(dataset_delete.os, "rename", refused)
    resp = client.delete("/api/datasets/pets")
    assert resp.status_code == 500 and resp.headers["content-type"] == "application/json", resp.text
    assert resp.json() == {
        "error": "WriteFailed",
        "detail": f"write failed: the dataset pets could not be deleted ({folder}): Permission denied; "
        + WRITE_ADVICE[errno.EACCES],
    }  # the trash name the rename aimed at is hidden: never shown
    assert [d["name"] for d in client.get("/api/datasets").json()["datasets"]] == ["pets"]  # nothing changed
    monkeypatch.setattr(dataset_delete.os, "rename", real)
    assert client.delete("/api/datasets/pets").status_code == 200  # redone once it can be
    assert not folder.exists()


def test_the_backstop_names_the_file_in_words_not_the_route() -> None:
    """An OSError no writer named (a bug: the log has its traceback) still reads as words."""
    app = FastAPI()
    install_error_handlers(app)

    @app.put("/api/things/{name}")
    def refuse(name: str) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), f"/data/{name}.txt")

    resp = TestClient(app, raise_server_exceptions=False).put("/api/things/x")
    assert resp.status_code == 500
    assert resp.json() == {
        "error": "WriteFailed",
        "detail": "write failed: a file this request changes could not be written or removed (/data/x.txt): "
        f"Read-only file system; {WRITE_ADVICE[errno.EROFS]}",
    }


@pytest.mark.parametrize("code", sorted(WRITE_FAILED_ERRNOS))
def test_every_write_failure_says_what_to_do_and_never_names_a_staging_file(
    tmp_path: Path, code: int
) -> None:
    target = tmp_path / "a.txt"
    staging = tmp_path / ".a.txt.123-4f2a.tmp"  # what open() of a writer's staging file names
    with pytest.raises(WriteFailed) as failed, writing("the caption of a.png could not be written", target):
        raise OSError(code, os.strerror(code), str(staging))
    assert str(failed.value) == (
        f"write failed: the caption of a.png could not be written ({target}): {os.strerror(code)}; {WRITE_ADVICE[code]}"
    )
    other = tmp_path / "control" / "a.png"  # a file the user knows is still named
    with pytest.raises(WriteFailed) as failed, writing("a.png of pets could not be deleted", tmp_path):
        raise OSError(code, os.strerror(code), str(other))
    assert f"{os.strerror(code)}: {other}; {WRITE_ADVICE[code]}" in str(failed.value)


def test_a_dataset_delete_whose_files_stay_is_done_and_names_where_they_are(
    client: TestClient, settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The folder moved aside (gone from listings), then a file in it refused its removal (an
    immutable file): the dataset is deleted (not "Not deleted: ..." on the page, its record
    forgotten), and the log names the hidden folder left, which the next start removes."""
    assert client.post("/api/datasets/pets/files", files=[("files", ("a.png", _png()))]).status_code == 201

    def refused(path: object) -> None:
        raise OSError(errno.EPERM, os.strerror(errno.EPERM), os.path.join(os.fsdecode(path), "a.png"))

    monkeypatch.setattr(dataset_delete.shutil, "rmtree", refused)
    resp = client.delete("/api/datasets/pets")
    assert resp.status_code == 200 and resp.json() == {"deleted": "pets"}, resp.text
    (trash,) = [p for p in settings.datasets_dir.iterdir() if p.name.startswith(dataset_delete.TRASH_PREFIX)]
    assert (
        f"dataset pets deleted, but some of its files could not be removed (Operation not permitted: {trash / 'a.png'}): they are in {trash}"
        in caplog.text
    )
    assert client.get("/api/datasets").json()["datasets"] == []
