"""Dataset uploads and edits: good files accumulate; every bad name, file or size is refused
with its 4xx and leaves no file anywhere (inside or outside the roots)."""

from __future__ import annotations

import io
import json
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from api_helpers import live_server, upload_folder
from fastapi.testclient import TestClient
from PIL import Image

from lorastudio.api.app import create_app
from lorastudio.settings import Settings


def _png(size: tuple[int, int] = (24, 16), color: str = "red") -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def _jpeg(size: tuple[int, int] = (24, 16)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, "green").save(buf, format="JPEG")
    return buf.getvalue()


def _tree(root: Path) -> set[str]:
    """Every path under `root` (files and folders), relative."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_uploads_accumulate_and_can_be_inspected_and_edited(client: TestClient, sample_dataset: Path) -> None:
    first = upload_folder(client, "shapes", sample_dataset)
    assert first.status_code == 201 and first.json()["images"] == 8
    extra = [("f", ("extra.png", _png())), ("f", ("extra.txt", b"an extra caption"))]
    second = client.post("/api/datasets/shapes/files", files=extra)
    assert second.status_code == 201, second.text
    assert (second.json()["images"], second.json()["captions"]) == (9, 9)
    assert second.json()["committed"] == ["extra.png", "extra.txt"]

    detail = client.get("/api/datasets/shapes").json()
    extra_row = next(f for f in detail["files"] if f["file"] == "extra.png")
    assert extra_row["caption"] == "an extra caption" and (extra_row["width"], extra_row["height"]) == (
        24,
        16,
    )
    assert [d["name"] for d in client.get("/api/datasets").json()["datasets"]] == ["shapes"]

    thumb = client.get("/api/datasets/shapes/thumbnails/extra.png", params={"size": 16})
    assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/jpeg"
    assert Image.open(io.BytesIO(thumb.content)).size == (16, 11)

    assert (
        client.put("/api/datasets/shapes/captions/extra.png", json={"caption": " new words "}).status_code
        == 200
    )
    assert (
        next(f for f in client.get("/api/datasets/shapes").json()["files"] if f["file"] == "extra.png")[
            "caption"
        ]
        == "new words"
    )
    assert client.put("/api/datasets/shapes/captions/nope.png", json={"caption": "x"}).status_code == 404
    nul = client.put("/api/datasets/shapes/captions/extra.png", json={"caption": "a\u0000b"})
    assert nul.status_code == 400 and nul.json()["problems"] == [
        "extra.png: the caption holds a NUL character"
    ]
    files = client.get("/api/datasets/shapes").json()["files"]
    assert next(f for f in files if f["file"] == "extra.png")["caption"] == "new words"  # unchanged

    deleted = client.delete("/api/datasets/shapes/images/extra.png")
    assert deleted.json()["deleted"] == ["extra.png", "extra.txt"]
    assert client.get("/api/datasets/shapes").json()["images"] == 8
    assert client.delete("/api/datasets/shapes/images/extra.png").status_code == 404

    meta = b'{"file_name": "m.png", "text": "from metadata"}\n'
    merged = client.post(
        "/api/datasets/shapes/files", files=[("f", ("m.png", _png())), ("f", ("metadata.jsonl", meta))]
    )
    assert merged.status_code == 201
    more = b'{"file_name": "n.png", "text": "second row"}\n'
    client.post(
        "/api/datasets/shapes/files", files=[("f", ("n.png", _png())), ("f", ("metadata.jsonl", more))]
    )
    captions = {f["file"]: f["caption"] for f in client.get("/api/datasets/shapes").json()["files"]}
    assert captions["m.png"] == "from metadata" and captions["n.png"] == "second row"  # rows merged


@pytest.mark.parametrize(
    ("files", "status", "needle"),
    [
        ([("f", ("../evil.png", _png()))], 400, "evil.png"),
        ([("f", (".hidden.png", _png()))], 400, "hidden"),
        ([("f", ("run.exe", b"MZ..."))], 400, "run.exe"),
        ([("f", ("fake.png", b"not really a png"))], 400, "fake.png"),
        ([("f", ("ok.png", _png())), ("f", ("orphan.txt", b"caption"))], 400, "orphan.txt"),
        ([("f", ("bad.png", _png())), ("f", ("bad.txt", b"\xff\xfe\xfa"))], 400, "UTF-8"),
        ([("f", ("ok.png", _png())), ("f", ("metadata.jsonl", b"{not json\n"))], 400, "metadata.jsonl"),
        ([("f", ("huge.png", _png((400, 400))))], 400, "oversized"),
    ],
)
def test_bad_uploads_are_refused_whole_with_strict_and_leave_nothing(
    settings: Settings, client: TestClient, files: list, status: int, needle: str
) -> None:
    client.app.state.settings.max_image_pixels = 100_000  # 400x400 = 160,000 px is a bomb here
    before = _tree(settings.home)
    resp = client.post("/api/datasets/fresh/files", params={"strict": "true"}, files=files)
    assert resp.status_code == status, resp.text
    assert needle in resp.text
    assert _tree(settings.home) == before
    assert not (settings.home.parent / "evil.png").exists()


@pytest.mark.parametrize(
    ("name", "status"),
    [(".hidden", 400), ("con", 400), ("bad:name", 400), ("%2E%2E", 404), ("..", 404), ("a%2Fb", 404)],
)
def test_bad_dataset_names_are_refused_and_write_nothing(
    settings: Settings, client: TestClient, name: str, status: int
) -> None:
    before = _tree(settings.home)
    resp = client.post(f"/api/datasets/{name}/files", files=[("f", ("a.png", _png()))])
    # "..": the client normalised it away, so no route has the path /api/files (404; it was the
    # built UI's 405 before fix 534); the others: an encoded dot segment or separator
    # (api/path_guard.py)
    assert resp.status_code == status, resp.text
    assert _tree(settings.home) == before


def test_a_symlinked_dataset_that_escapes_the_root_is_refused(
    settings: Settings, client: TestClient, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, settings.datasets_dir / "link")
    resp = client.post("/api/datasets/link/files", files=[("f", ("a.png", _png()))])
    assert resp.status_code == 400 and resp.json()["error"] == "PathOutsideRoot"
    assert list(outside.iterdir()) == []
    assert client.get("/api/datasets/link").status_code == 400


def test_requests_over_the_size_cap_are_413(settings: Settings, client: TestClient) -> None:
    client.app.state.settings.max_upload_mb = 1
    before = _tree(settings.home)
    big = os.urandom(2 * 2**20)
    resp = client.post("/api/datasets/big/files", files=[("f", ("big.png", big))])
    assert resp.status_code == 413 and resp.json()["error"] == "UploadTooLarge"
    assert _tree(settings.home) == before


def test_a_chunked_upload_without_length_is_cut_off_at_the_cap(
    settings: Settings, client: TestClient
) -> None:
    client.app.state.settings.max_upload_mb = 1
    before = _tree(settings.home)
    boundary = "lorastudio-test-boundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="f"; filename="big.png"\r\n'
        "Content-Type: image/png\r\n\r\n"
    ).encode()

    def body() -> Iterator[bytes]:  # no Content-Length: the server must count as it reads
        yield head
        for _ in range(3):
            yield os.urandom(2**20)
        yield f"\r\n--{boundary}--\r\n".encode()

    resp = client.post(
        "/api/datasets/chunked/files",
        content=body(),
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    assert resp.status_code == 413
    assert _tree(settings.home) == before


def test_links_in_a_dataset_are_never_served(settings: Settings, client: TestClient, tmp_path: Path) -> None:
    """A caption, image or metadata.jsonl that is a symbolic link to a file outside the dataset
    is listed as dropped, and its content appears in no response."""
    secret = "outside text that must never be served"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(secret)
    (outside / "secret.png").write_bytes(_png((40, 40), "blue"))
    (outside / "metadata.jsonl").write_text(json.dumps({"file_name": "b.png", "text": secret}))
    assert client.post("/api/datasets/ds/files", files=[("f", ("a.png", _png()))]).status_code == 201
    folder = settings.datasets_dir / "ds"
    (folder / "a.txt").symlink_to(outside / "secret.txt")
    (folder / "b.png").symlink_to(outside / "secret.png")
    (folder / "metadata.jsonl").symlink_to(outside / "metadata.jsonl")

    detail = client.get("/api/datasets/ds")
    assert detail.status_code == 200 and secret not in detail.text
    assert [(f["file"], f["caption"]) for f in detail.json()["files"]] == [("a.png", None)]
    assert {d["file"]: d["reason"] for d in detail.json()["dropped"]} == {
        name: "symbolic link (not followed)" for name in ("a.txt", "b.png", "metadata.jsonl")
    }
    assert client.get("/api/datasets/ds/thumbnails/b.png").status_code == 404
    listed = client.get("/api/datasets").json()["datasets"]
    assert [(d["name"], d["images"], d["captions"]) for d in listed] == [("ds", 1, 0)]


def test_deleting_an_image_keeps_a_caption_another_image_uses(settings: Settings, client: TestClient) -> None:
    files = [("f", ("a.png", _png())), ("f", ("a.jpg", _jpeg())), ("f", ("a.txt", b"shared caption"))]
    assert client.post("/api/datasets/pair/files", files=files).status_code == 201
    gone = client.delete("/api/datasets/pair/images/a.png")
    assert gone.status_code == 200 and gone.json()["deleted"] == ["a.png"]
    folder = settings.datasets_dir / "pair"
    assert sorted(p.name for p in folder.iterdir()) == ["a.jpg", "a.txt"]
    last = client.delete("/api/datasets/pair/images/a.jpg")
    assert last.json()["deleted"] == ["a.jpg", "a.txt"]
    assert list(folder.iterdir()) == []


def test_concurrent_uploads_to_one_dataset_keep_every_metadata_row(settings: Settings) -> None:
    """Ten uploads at once, each an image and a metadata.jsonl row, to one new dataset on a real
    server: every image and every row is there afterwards."""
    with live_server(create_app(settings)) as server:
        barrier = threading.Barrier(10)

        def upload(i: int) -> int:
            row = json.dumps({"file_name": f"img{i}.png", "text": f"caption {i}"})
            files = [("f", (f"img{i}.png", _png())), ("f", ("metadata.jsonl", row.encode()))]
            with httpx.Client(base_url=server.url, timeout=60) as c:
                barrier.wait()
                return c.post("/api/datasets/crowd/files", files=files).status_code

        with ThreadPoolExecutor(10) as pool:
            codes = list(pool.map(upload, range(10)))
        assert codes == [201] * 10
        detail = server.client.get("/api/datasets/crowd").json()
    assert {f["file"]: f["caption"] for f in detail["files"]} == {
        f"img{i}.png": f"caption {i}" for i in range(10)
    }
    lines = (settings.datasets_dir / "crowd" / "metadata.jsonl").read_text().splitlines()
    assert len(lines) == 10
    assert not (settings.datasets_dir / ".locks").exists()


def test_a_thumbnail_that_cannot_get_a_decode_thread_is_503_with_retry_after(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lorastudio.data import thumbnails
    from lorastudio.data.decode_slots import DECODE_SLOTS, run_decode

    assert client.post("/api/datasets/busy/files", files=[("f", ("a.png", _png()))]).status_code == 201
    monkeypatch.setattr(thumbnails, "THUMB_WAIT_S", 0.2)
    release = threading.Event()
    running = threading.Barrier(DECODE_SLOTS + 1)

    def hold() -> None:
        running.wait(5)
        release.wait(10)

    holders = [threading.Thread(target=run_decode, args=(hold,)) for _ in range(DECODE_SLOTS)]
    for t in holders:
        t.start()
    running.wait(5)
    try:
        busy = client.get("/api/datasets/busy/thumbnails/a.png")
    finally:
        release.set()
        for t in holders:
            t.join(10)
    assert busy.status_code == 503 and busy.headers["retry-after"] == "1", busy.text
    assert "decoding other images" in busy.json()["detail"]
    assert client.get("/api/datasets/busy/thumbnails/a.png").status_code == 200
