"""The decoded-image record (data/decoded.py, <home>/cache/decoded/) attacked (RELIABILITY 180-181).

A record damaged, planted or swapped for something else is a cache miss (the files are decoded
again), never an error: before, a record of another JSON form ([], files not an object, a float
size, deep nesting) made every preflight of its dataset a 500 (AttributeError, KeyError,
OverflowError, RecursionError), a FIFO put in its place hung the check and a link to /dev/zero
read without end. And the record never lets an undecodable image through: one written over a
recorded image in place, to the same size with its mtime put back, is decoded again (the key has
the ctime), whether the image was recorded by a check or by an upload into an existing dataset.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.file_rewrites import rewrite_keeping_mtime
from tests.polling import until

from lorastudio.data import decoded, images
from lorastudio.data.decoded import DecodedRecord
from lorastudio.data.safe_open import folder_identity
from lorastudio.settings import Settings
from undecodable_images import chunks_of, noisy, png_of, record_full_decodes


def _garbled(good: bytes) -> bytes:
    """`good` with 200 bytes inside its deflate stream zeroed, chunk CRCs valid: same length,
    decodes only as far as the header check."""
    out = [(k, d[:40] + bytes(200) + d[240:] if k == b"IDAT" else d) for k, d in chunks_of(good)]
    bad = png_of(out)
    assert len(bad) == len(good)
    return bad


def _dataset(settings: Settings, name: str = "set") -> Path:
    folder = settings.datasets_dir / name
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(2):
        (folder / f"s{i}.png").write_bytes(noisy("PNG", 48, seed=i))
        (folder / f"s{i}.txt").write_text(f"noise {i}")
    return folder


def _record_file(settings: Settings, folder: Path) -> Path:
    return DecodedRecord(settings.decoded_record_dir, folder, folder_identity(folder)).path


VALID_HEAD = f'{{"version":{decoded.RECORD_VERSION},"rules":{json.dumps(images.DECODE_RULES)},'
DAMAGED = {
    "a list": "[]",
    "a string": '"x"',
    "no files": VALID_HEAD[:-1] + "}",
    "files a list": VALID_HEAD + '"files":[]}',
    "an infinite size": VALID_HEAD + '"files":{"s0.png":[1e400,1,1,1,1,1,1]}}',
    "a short row": VALID_HEAD + '"files":{"s0.png":[1,2]}}',
    "a huge int": VALID_HEAD + '"files":{"s0.png":[' + "9" * 5000 + ",1,1,1,1,1,1]}}",
    "deep nesting": "[" * 100_000 + "]" * 100_000,
    "not UTF-8": "\udcff",
}


@pytest.mark.parametrize("body", list(DAMAGED.values()), ids=list(DAMAGED))
def test_a_damaged_record_costs_decodes_never_an_error(
    body: str,
    client: TestClient,
    settings: Settings,
    flux_config: Callable[..., dict],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = _dataset(settings)
    config = {"config": flux_config(data_dir="set")}
    assert client.post("/api/train/preflight", json=config).status_code == 200
    _record_file(settings, folder).write_bytes(body.encode("utf-8", "surrogateescape"))
    full_decodes = record_full_decodes(monkeypatch)
    answer = client.post("/api/train/preflight", json=config)
    assert answer.status_code == 200, answer.text
    assert sorted(full_decodes) == ["s0.png", "s1.png"]  # decoded again, and recorded again
    full_decodes.clear()
    assert client.post("/api/train/preflight", json=config).status_code == 200 and full_decodes == []


def test_a_record_swapped_for_a_fifo_a_link_or_a_huge_file_is_not_read(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    folder = _dataset(settings)
    fid = folder_identity(folder)
    record = DecodedRecord.load(settings.decoded_record_dir, folder, fid)
    for name in ("s0.png", "s1.png"):
        record.add(folder / name, decoded.file_key(folder / name), images.ImageInfo(48, 48, 1))
    record.save()
    valid = record.path.read_bytes()
    monkeypatch.setattr(decoded, "RECORD_MAX_BYTES", len(valid) - 1)  # a record over the bound
    assert DecodedRecord.load(settings.decoded_record_dir, folder, fid).files == {}
    monkeypatch.setattr(decoded, "RECORD_MAX_BYTES", len(valid))
    assert len(DecodedRecord.load(settings.decoded_record_dir, folder, fid).files) == 2
    (tmp_path / "real.json").write_bytes(valid)
    for plant in ("fifo", "link to a record", "link to /dev/zero"):
        record.path.unlink()
        if plant == "fifo":
            os.mkfifo(record.path)
        else:
            os.symlink(tmp_path / "real.json" if plant == "link to a record" else "/dev/zero", record.path)
        loaded = _load_in_thread(settings, folder, fid)  # the old code blocked on the FIFO for ever
        until(lambda loaded=loaded: bool(loaded), timeout=60, what=f"the load of a record that is a {plant}")
        assert loaded == [{}], plant


def _load_in_thread(settings: Settings, folder: Path, fid: tuple[int, int]) -> list[dict]:
    """A list that gets the loaded record's files once DecodedRecord.load returns."""
    loaded: list[dict] = []

    def load() -> None:
        loaded.append(DecodedRecord.load(settings.decoded_record_dir, folder, fid).files)

    threading.Thread(target=load, daemon=True).start()
    return loaded


def test_an_image_rewritten_in_place_with_its_mtime_put_back_is_decoded_again(
    client: TestClient, settings: Settings, flux_config: Callable[..., dict]
) -> None:
    folder = _dataset(settings)
    config = {"config": flux_config(data_dir="set")}
    assert client.post("/api/train/preflight", json=config).status_code == 200  # both recorded
    rewrite_keeping_mtime(folder / "s1.png", _garbled((folder / "s1.png").read_bytes()))
    refused = client.post("/api/train/preflight", json=config)
    assert refused.status_code == 400 and "s1.png: corrupt (" in refused.text, refused.text


def test_an_upload_into_an_existing_dataset_is_recorded_and_an_in_place_rewrite_seen(
    client: TestClient, settings: Settings, flux_config: Callable[..., dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second upload moves file by file (a rename changes the ctime): its images are still
    recorded, as the first upload's (the staging folder renamed whole)."""
    full_decodes = record_full_decodes(monkeypatch)
    for i in range(2):
        files = [("f", (f"u{i}.png", noisy("PNG", 48, seed=i))), ("f", (f"u{i}.txt", b"noise"))]
        assert client.post("/api/datasets/up/files", files=files).status_code == 201
    assert full_decodes == ["u0.png", "u1.png"]
    config = {"config": flux_config(data_dir="up")}
    assert client.post("/api/train/preflight", json=config).status_code == 200
    assert full_decodes == ["u0.png", "u1.png"]  # nothing decoded again
    path = settings.datasets_dir / "up" / "u1.png"
    rewrite_keeping_mtime(path, _garbled(path.read_bytes()))
    refused = client.post("/api/train/preflight", json=config)
    assert refused.status_code == 400 and "u1.png: corrupt (" in refused.text, refused.text
