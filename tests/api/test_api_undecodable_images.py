"""Images whose header is fine but whose pixels do not decode (RELIABILITY 151).

A truncated JPEG or PNG, a PNG with a bad IDAT CRC, and (what the chunk walk could not see) a PNG
whose compressed pixel stream is cut short or garbled under valid chunk CRCs: an upload refuses
each naming the file and why; one copied into a dataset folder by hand is named by the preflight
and by `lorastudio train --check` before any model loads. Each file's pixels are decoded once
(at upload or at its first check) and remembered by (name, size, mtime_ns, inode, ctime_ns) in the
dataset's record (data/decoded.py): a second preflight decodes nothing, an edited file is
decoded again.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import typer
from api_helpers import FINAL, LiveServer, read_events, wait_idle, wait_status
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from lorastudio.data import decoded, images
from lorastudio.settings import Settings
from undecodable_images import chunks_of, idat_cut_short, idat_ends_early, noisy, png_of, record_full_decodes


def _idat_garbled() -> bytes:
    """Valid chunks and CRCs, but bytes inside the deflate stream overwritten."""
    chunks = chunks_of(noisy("PNG"))
    out = []
    for kind, data in chunks:
        if kind == b"IDAT":
            data = data[:40] + bytes(200) + data[240:]
        out.append((kind, data))
    return png_of(out)


def _bad_crc() -> bytes:
    png = bytearray(noisy("PNG"))
    png[png.find(b"IDAT") + 30] ^= 0xFF
    return bytes(png)


def _half(data: bytes) -> bytes:
    return data[: len(data) // 2]


BAD = {  # file name -> (bytes, what its reason says)
    "half.jpg": (_half(noisy("JPEG")), "corrupt (image file is truncated"),
    "half.png": (_half(noisy("PNG")), "corrupt (truncated PNG file"),
    "crc.png": (_bad_crc(), "corrupt (bad CRC in PNG chunk IDAT)"),
    "short.png": (idat_cut_short(), "corrupt ("),
    "garbled.png": (_idat_garbled(), "corrupt ("),
}
# What the header and chunk checks alone let through (the files the full decode catches).
PIXELS_ONLY = ("short.png", "garbled.png")


@pytest.fixture
def full_decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files whose every pixel the process decodes (images._full_decode)."""
    return record_full_decodes(monkeypatch)


def test_the_header_checks_alone_pass_the_pixel_only_damage(tmp_path: Path) -> None:
    """The cases the full decode exists for: the cheap check (headers, CRCs) accepts them."""
    for name in PIXELS_ONLY:
        (tmp_path / name).write_bytes(BAD[name][0])
        assert images.probe_image(tmp_path / name, 10**8).width == 48
        with pytest.raises(images.DatasetError) as info:
            images.probe_image(tmp_path / name, 10**8, full=True)
        assert info.value.problems[0].startswith(f"{name}: corrupt ("), info.value.problems


def test_an_upload_refuses_each_undecodable_image_naming_it(client: TestClient, settings: Settings) -> None:
    files = [("f", ("good.png", noisy("PNG"))), ("f", ("good.txt", b"noise"))]
    files += [("f", (name, data)) for name, (data, _) in BAD.items()]
    files += [("f", ("short.txt", b"a caption of a broken image"))]
    resp = client.post("/api/datasets/up/files", files=files)
    assert resp.status_code == 201, resp.text
    assert resp.json()["committed"] == ["good.png", "good.txt"]
    refused = {r["file"]: r["reason"] for r in resp.json()["refused"]}
    assert set(refused) == {*BAD, "short.txt"}
    for name, (_, reason) in BAD.items():
        assert refused[name].startswith(reason), (name, refused[name])
    assert refused["short.txt"] == "its image short.png was refused"
    assert sorted(p.name for p in (settings.datasets_dir / "up").iterdir()) == ["good.png", "good.txt"]
    alone = client.post("/api/datasets/up/files", files=[("f", ("garbled.png", BAD["garbled.png"][0]))])
    assert alone.status_code == 400, alone.text
    assert alone.json()["problems"][0].startswith("garbled.png: corrupt (")


def _handmade(settings: Settings, bad: str | None = None) -> Path:
    folder = settings.datasets_dir / "handmade"
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(3):
        (folder / f"s{i}.png").write_bytes(noisy("PNG", 32, seed=i))
        (folder / f"s{i}.txt").write_text(f"noise {i}")
    if bad is not None:
        (folder / bad).write_bytes(BAD[bad][0])
        (folder / f"{Path(bad).stem}.txt").write_text("a broken one")
    return folder


@pytest.mark.parametrize("bad", list(BAD))
def test_a_hand_copied_undecodable_image_is_named_by_the_preflight_and_the_cli(
    bad: str,
    client: TestClient,
    settings: Settings,
    flux_config: Callable[..., dict],
    cli: typer.Typer,
    tmp_path: Path,
) -> None:
    _handmade(settings, bad)
    config = flux_config(data_dir="handmade")
    refused = client.post("/api/train/preflight", json={"config": config})
    assert refused.status_code == 400, refused.text
    problems = [p["message"] if isinstance(p, dict) else p for p in refused.json()["problems"]]
    assert any(f"{bad}: {BAD[bad][1]}" in p for p in problems), problems
    path = tmp_path / "run.json"
    path.write_text(json.dumps(config))
    checked = CliRunner().invoke(cli, ["train", str(path), "--check", "--device", "cpu"])
    assert checked.exit_code != 0, checked.output
    assert f"{bad}: {BAD[bad][1]}" in checked.output


def test_each_file_is_decoded_once_and_again_when_it_changes(
    client: TestClient, settings: Settings, flux_config: Callable[..., dict], full_decodes: list[str]
) -> None:
    folder = _handmade(settings)
    config = {"config": flux_config(data_dir="handmade")}
    assert client.post("/api/train/preflight", json=config).status_code == 200
    assert sorted(full_decodes) == ["s0.png", "s1.png", "s2.png"]
    full_decodes.clear()
    assert client.post("/api/train/preflight", json=config).status_code == 200
    assert full_decodes == []  # remembered: nothing decoded again
    (folder / "s1.png").write_bytes(BAD["garbled.png"][0])  # replaced by hand: decoded, refused
    refused = client.post("/api/train/preflight", json=config)
    assert refused.status_code == 400 and full_decodes == ["s1.png"], refused.text
    assert "s1.png: corrupt (" in refused.text
    full_decodes.clear()
    (folder / "s1.png").write_bytes(noisy("PNG", 32, seed=9))
    os.utime(folder / "s0.png", ns=(1, 1))  # touched: its mtime is another, decoded again
    assert client.post("/api/train/preflight", json=config).status_code == 200
    assert sorted(full_decodes) == ["s0.png", "s1.png"]


def test_an_uploaded_image_is_not_decoded_again_by_the_preflight(
    client: TestClient, flux_config: Callable[..., dict], full_decodes: list[str]
) -> None:
    files = [("f", (f"u{i}.png", noisy("PNG", 32, seed=i))) for i in range(2)]
    files += [("f", (f"u{i}.txt", f"noise {i}".encode())) for i in range(2)]
    assert client.post("/api/datasets/uploaded/files", files=files).status_code == 201
    assert sorted(full_decodes) == ["u0.png", "u1.png"]  # the upload's check
    full_decodes.clear()
    config = {"config": flux_config(data_dir="uploaded")}
    assert client.post("/api/train/preflight", json=config).status_code == 200
    assert full_decodes == []


def test_an_upload_is_recorded_on_the_real_file_clock(
    client: TestClient,
    flux_config: Callable[..., dict],
    full_decodes: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An upload keys its files right after moving them in, within the moves' tick of the file
    clock (racy: RELIABILITY 212); it waits that tick out (decoded.wait_out_racy) so that they are
    still recorded and the next preflight decodes none of them."""
    monkeypatch.setattr(decoded, "file_clock_ns", time.time_ns)  # the real clock (conftest's is ahead)
    files = [("f", (f"u{i}.png", noisy("PNG", 32, seed=i))) for i in range(2)]
    files += [("f", (f"u{i}.txt", f"noise {i}".encode())) for i in range(2)]
    assert client.post("/api/datasets/uploaded/files", files=files).status_code == 201
    assert sorted(full_decodes) == ["u0.png", "u1.png"]
    full_decodes.clear()
    config = {"config": flux_config(data_dir="uploaded")}
    assert client.post("/api/train/preflight", json=config).status_code == 200
    assert full_decodes == []


def test_the_full_decodes_of_one_check_are_bounded_by_time(
    client: TestClient,
    settings: Settings,
    flux_config: Callable[..., dict],
    full_decodes: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the budget the files keep the cheap check (a later check decodes them)."""
    monkeypatch.setattr(decoded, "FULL_DECODE_BUDGET_S", 0.0)
    _handmade(settings, "garbled.png")
    config = {"config": flux_config(data_dir="handmade")}
    assert client.post("/api/train/preflight", json=config).status_code == 200  # not seen yet
    assert full_decodes == []
    monkeypatch.setattr(decoded, "FULL_DECODE_BUDGET_S", 30.0)
    assert client.post("/api/train/preflight", json=config).status_code == 400
    assert "garbled.png" in full_decodes


def test_a_file_the_checks_left_fails_the_workers_run_before_its_models_load(
    server: LiveServer,
    settings: Settings,
    flux_config: Callable[..., dict],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server's checks past their budget pass a PNG whose stream ends cleanly before its
    last row; the worker's own scan decodes it and fails the job before any model loads, naming
    it in the job's error. (The worker is another process, whose budget this test cannot spend:
    that its scan has none, RELIABILITY 165, is tests/unit/training/test_run_decodes_all.py's.)"""
    monkeypatch.setattr(decoded, "FULL_DECODE_BUDGET_S", 0.0)
    folder = _handmade(settings)
    (folder / "zz.png").write_bytes(idat_ends_early())
    (folder / "zz.txt").write_text("its last rows missing")
    started = server.client.post("/api/train/start", json={"config": flux_config(data_dir="handmade")})
    assert started.status_code == 201, started.text
    job_id = started.json()["id"]
    kinds = [e["type"] for e in read_events(server.client, job_id)]
    assert kinds[-1] == "error" and "model_load_started" not in kinds, kinds
    job = wait_status(server.client, job_id, FINAL)
    assert job["status"] == "failed" and "zz.png: corrupt (PNG pixel data cut short" in job["error"], job
    wait_idle(server.client)


@pytest.mark.parametrize("bad", ["half.jpg", "half.png", "crc.png", "garbled.png"])
def test_the_training_decode_names_the_file(tmp_path: Path, bad: str) -> None:
    """Past the checks (a file beyond a check's time budget), the worker's decode (load_rgb,
    what data/crop.py trains from) fails naming the file, not deep in a model."""
    (tmp_path / bad).write_bytes(BAD[bad][0])
    with pytest.raises(images.DatasetError) as info:
        images.load_rgb(tmp_path / bad)
    assert info.value.problems[0].startswith(f"{bad}: corrupt ("), info.value.problems
