"""Issue 29 part 7: an upload stores its good files and lists the bad ones with their reasons
(all or nothing with strict=true); .bmp is refused by name, as the web picker does; a dataset is
deleted whole (API and CLI), never while a queued or running job trains on it."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import typer
from api_helpers import FINAL, LiveServer, upload_folder, wait_idle, wait_status
from fastapi.testclient import TestClient
from PIL import Image
from typer.testing import CliRunner

from lorastudio.data.discovery import IMAGE_EXTENSIONS
from lorastudio.data.uploads import REFUSED_IMAGE_EXTENSIONS
from lorastudio.errors import NotFound
from lorastudio.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def _png(color: str = "red", size: tuple[int, int] = (24, 16)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def _bmp() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), "blue").save(buf, format="BMP")
    return buf.getvalue()


def _mixed() -> list:
    return [
        ("f", ("a.png", _png("red"))),
        ("f", ("a.txt", b"a red square")),
        ("f", ("b.png", _png("green"))),
        ("f", ("broken.png", b"\x89PNG\r\n\x1a\n not a real png")),
        ("f", ("broken.txt", b"caption of the broken image")),
        ("f", ("scan.bmp", _bmp())),
        ("f", ("orphan.txt", b"no image")),
    ]


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_a_mixed_upload_stores_the_good_files_and_names_each_refused_one(
    settings: Settings, client: TestClient
) -> None:
    resp = client.post("/api/datasets/mix/files", files=_mixed())
    assert resp.status_code == 201, resp.text
    body = resp.json()
    assert body["committed"] == ["a.png", "a.txt", "b.png"]
    assert (body["images"], body["captions"]) == (2, 1)
    reasons = {r["file"]: r["reason"] for r in body["refused"]}
    assert sorted(reasons) == ["broken.png", "broken.txt", "orphan.txt", "scan.bmp"]
    assert "broken.png was refused" in reasons["broken.txt"]
    assert "BMP" in reasons["scan.bmp"] and "PNG" in reasons["scan.bmp"]
    assert "no image named orphan" in reasons["orphan.txt"]
    assert reasons["broken.png"]  # the decoder's reason, not empty
    assert _files(settings.datasets_dir / "mix") == ["a.png", "a.txt", "b.png"]
    assert not (settings.datasets_dir / ".uploads").exists()
    # into an existing dataset: the good file is added, the refused caption is not
    again = client.post(
        "/api/datasets/mix/files", files=[("f", ("c.png", _png("blue"))), ("f", ("x.png", b"junk"))]
    )
    assert again.status_code == 201 and again.json()["committed"] == ["c.png"]
    assert [r["file"] for r in again.json()["refused"]] == ["x.png"]
    assert _files(settings.datasets_dir / "mix") == ["a.png", "a.txt", "b.png", "c.png"]


def test_strict_refuses_the_whole_batch_and_nothing_stored_is_400(
    settings: Settings, client: TestClient
) -> None:
    strict = client.post("/api/datasets/mix/files", params={"strict": "true"}, files=_mixed())
    assert strict.status_code == 400, strict.text
    problems = strict.json()["problems"]
    for name in ("broken.png", "broken.txt", "scan.bmp", "orphan.txt"):
        assert any(p.startswith(f"{name}: ") for p in problems), (name, problems)
    assert not (settings.datasets_dir / "mix").exists()

    nothing = client.post(
        "/api/datasets/mix/files", files=[("f", ("x.png", b"junk")), ("f", ("x.txt", b"caption"))]
    )
    assert nothing.status_code == 400
    assert any(p.startswith("x.txt: its image x.png was refused") for p in nothing.json()["problems"])
    assert _files(settings.datasets_dir) == []


def test_the_picker_accepts_exactly_the_server_image_types() -> None:
    """web/src/lib/upload.ts's IMAGE_EXTENSIONS (the picker's accept list) is the server's list."""
    source = (REPO / "web/src/lib/upload.ts").read_text()
    listed = re.search(r"IMAGE_EXTENSIONS = \[([^\]]*)\]", source)
    assert listed is not None
    web = tuple(re.findall(r'"(\.[a-z]+)"', listed.group(1)))
    assert web == IMAGE_EXTENSIONS
    assert not set(web) & set(REFUSED_IMAGE_EXTENSIONS)


def test_a_bmp_and_its_caption_are_refused_alike_by_the_server_the_picker_and_the_cli(
    settings: Settings, client: TestClient, cli: typer.Typer, tmp_path: Path
) -> None:
    """The web planner says "scan.bmp: BMP images are not accepted ..." and "scan.txt: its image
    scan.bmp was refused"; the server and `datasets import` give the same two reasons."""
    source = (REPO / "web/src/lib/upload.ts").read_text()
    bmp_reason = re.search(r'BMP_REASON = "([^"]*)"', source)
    assert bmp_reason is not None
    files = [("f", ("scan.bmp", _bmp())), ("f", ("scan.txt", b"a scan")), ("f", ("a.png", _png()))]
    resp = client.post("/api/datasets/bmp/files", files=files)
    assert resp.status_code == 201, resp.text
    expected = {"scan.bmp": bmp_reason.group(1), "scan.txt": "its image scan.bmp was refused"}
    assert {r["file"]: r["reason"] for r in resp.json()["refused"]} == expected
    folder = tmp_path / "scans"
    folder.mkdir()
    for _, (name, data) in files:
        (folder / name).write_bytes(data)
    result = CliRunner().invoke(cli, ["datasets", "import", str(folder), "--name", "bmp-cli"])
    assert result.exit_code == 0, result.output
    assert all(f"refused {name}: {why}" in result.output for name, why in expected.items()), result.output
    assert _files(settings.datasets_dir / "bmp-cli") == ["a.png"]


def test_deleting_a_dataset_removes_it_whole(settings: Settings, client: TestClient) -> None:
    assert client.post("/api/datasets/gone/files", files=[("f", ("a.png", _png()))]).status_code == 201
    assert client.post("/api/datasets/kept/files", files=[("f", ("a.png", _png()))]).status_code == 201
    resp = client.delete("/api/datasets/gone")
    assert resp.status_code == 200 and resp.json() == {"deleted": "gone"}
    assert [d["name"] for d in client.get("/api/datasets").json()["datasets"]] == ["kept"]
    assert _files(settings.datasets_dir) == ["kept"]  # no .deleting-* or lock left behind
    assert client.delete("/api/datasets/gone").status_code == 404
    assert client.delete("/api/datasets/.hidden").status_code == 400


def test_the_cli_deletes_a_dataset(cli: typer.Typer, settings: Settings) -> None:
    folder = settings.datasets_dir / "old"
    folder.mkdir(parents=True)
    (folder / "a.png").write_bytes(_png())
    result = CliRunner().invoke(cli, ["datasets", "delete", "old", "--yes"])
    assert result.exit_code == 0, result.output
    assert not folder.exists() and _files(settings.datasets_dir) == []
    missing = CliRunner().invoke(cli, ["datasets", "delete", "old", "--yes"])
    assert isinstance(missing.exception, NotFound) and "no dataset named 'old'" in str(missing.exception)


@pytest.mark.slow  # a real worker (~15 s); the fast variant is in tests/unit/data/test_data_delete.py
def test_a_dataset_a_running_job_uses_cannot_be_deleted(
    server: LiveServer, sample_dataset: Path, flux_config: Callable[..., dict]
) -> None:
    client = server.client
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    started = client.post("/api/train/start", json={"config": flux_config(output_name="busy", steps=400)})
    assert started.status_code == 201, started.text
    job_id = started.json()["id"]  # from here the job is live (starting, then running)
    refused = client.delete("/api/datasets/shapes")
    assert refused.status_code == 409 and refused.json()["error"] == "JobActive"
    assert client.get("/api/datasets/shapes").json()["images"] == 8
    assert client.post("/api/train/stop", json={"save": False}).status_code == 200
    wait_status(client, job_id, FINAL)
    wait_idle(client)
    assert client.delete("/api/datasets/shapes").status_code == 200
    assert client.get("/api/datasets/shapes").status_code == 404
