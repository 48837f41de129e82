"""The gallery while its images are deleted (session 25 generation audit): an image deleted
between the listing's glob and its stat (a DELETE from another tab, a user's rm) made
GET /api/gallery a 500 for every image; a file deleted between a download route's check and
its answer (GET /gallery/<file>, a LoRA, a sample) was Starlette's RuntimeError, a 500; two
DELETEs of one image racing past the check gave the second a 500. Each race is made to land
at its worst moment: the listing leaves the image out, the download and the second DELETE
are 404s."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from lorastudio.api.downloads import Download
from lorastudio.api.routes import generate as generate_routes
from lorastudio.jobs import gallery as gallery_module
from lorastudio.settings import Settings


def _gallery(settings: Settings, stems: tuple[str, ...]) -> Path:
    folder = settings.home / "gallery"
    folder.mkdir(parents=True)
    for stem in stems:
        buf = io.BytesIO()
        Image.new("RGB", (8, 8), "blue").save(buf, format="PNG")
        (folder / f"{stem}.png").write_bytes(buf.getvalue())
        (folder / f"{stem}.json").write_text(json.dumps({"prompt": stem, "seed": 1}))
    return folder


def test_an_image_deleted_while_the_gallery_is_listed_is_left_out(
    settings: Settings, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _gallery(settings, ("kept", "gone"))
    read = gallery_module.read_sidecar

    def read_then_delete(path: Path) -> dict:
        meta = read(path)
        if path.stem == "gone":  # the other tab's DELETE lands after the scan saw the PNG
            (folder / "gone.png").unlink()
            path.unlink()
        return meta

    monkeypatch.setattr(gallery_module, "read_sidecar", read_then_delete)
    answer = client.get("/api/gallery")
    assert answer.status_code == 200, answer.text
    assert [i["file"] for i in answer.json()["images"]] == ["kept.png"]


def test_a_gallery_file_deleted_before_its_answer_is_a_404(
    settings: Settings, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _gallery(settings, ("img",))

    class DeletedMeanwhile(Download):
        def __init__(self, path: Path, **kwargs: object) -> None:
            super().__init__(path, **kwargs)
            Path(path).unlink()  # after the route's check, before the answer reads it

    monkeypatch.setattr(generate_routes, "Download", DeletedMeanwhile)
    answer = client.get("/gallery/img.png")
    assert answer.status_code == 404, answer.text
    assert answer.json()["error"] == "NotFound" and "img.png" in answer.json()["detail"]
    assert not (folder / "img.png").exists()


def test_a_second_delete_racing_past_the_check_is_a_404(
    settings: Settings, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _gallery(settings, ("img",))
    is_file = Path.is_file

    def checked_then_taken(self: Path, *args: object, **kwargs: object) -> bool:
        found = is_file(self, *args, **kwargs)
        if found and self.name == "img.png":  # the first DELETE runs right after this one's check
            self.unlink()
            self.with_suffix(".json").unlink()
        return found

    monkeypatch.setattr(Path, "is_file", checked_then_taken)
    answer = client.delete("/api/gallery/img.png")
    assert answer.status_code == 404, answer.text
    assert answer.json()["error"] == "NotFound"
    assert list(folder.iterdir()) == []


def test_a_gallery_file_deleted_once_its_headers_are_set_is_still_sent_whole(
    settings: Settings, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Starlette stat'ed the file, sent a 200 with its length, then opened it: one deleted in
    between (found by 2 clients deleting while 2 listed and fetched) cut the answer after its
    headers and logged a traceback. The file is now opened before the headers and sent whole."""
    folder = _gallery(settings, ("img",))
    whole = (folder / "img.png").read_bytes()
    set_headers = Download.set_stat_headers

    def then_deleted(self: Download, st: object) -> None:
        set_headers(self, st)
        Path(self.path).unlink(missing_ok=True)  # a DELETE lands once the headers are decided

    monkeypatch.setattr(Download, "set_stat_headers", then_deleted)
    answer = client.get("/gallery/img.png")
    assert answer.status_code == 200 and answer.content == whole
    ranged = (folder / "img.png").write_bytes(whole) and client.get(
        "/gallery/img.png", headers={"Range": "bytes=1-4"}
    )
    assert ranged.status_code == 206 and ranged.content == whole[1:5]
