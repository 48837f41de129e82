"""A studio left running: what repeated operations leave behind must be bounded by the data
kept, not by the operations done (bench/soak.py is the long version on a real server)."""

from __future__ import annotations

import io
import json
import os
import time

import pytest
from api_helpers import upload_images
from fastapi.testclient import TestClient
from PIL import Image

from lorastudio import file_age
from lorastudio.host_clock import host_now
from lorastudio.jobs.references import ORPHAN_AFTER_S, USES
from lorastudio.settings import Settings


def test_deleted_datasets_leave_no_decoded_record(client: TestClient, settings: Settings) -> None:
    """Each upload records which images were decoded fully (cache/decoded/, one record per
    dataset folder); a deleted dataset's record stayed, so making and deleting datasets grew the
    cache by a file each time, for ever (a folder made again under the name is a new inode,
    so a new record). Now a delete removes its folder's record."""
    records = settings.decoded_record_dir
    for round_ in range(4):
        for name in ("a", "b"):
            upload_images(client, name, 2, caption=f"round {round_}")
        assert len(list(records.glob("*.json"))) == 2
        for name in ("a", "b"):
            assert client.delete(f"/api/datasets/{name}").status_code == 200
        assert list(records.glob("*.json")) == []


def _png(shade: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (shade, 40, 90)).save(buf, format="PNG")
    return buf.getvalue()


def test_uploaded_references_no_image_names_do_not_stay_for_ever(
    client: TestClient, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each POST /api/generate/references kept its files for ever, used or not (the page
    uploads on each pick; a cancelled or failed generation, a deleted image leave them unnamed):
    the folder grew with every upload. Now an upload removes the references no gallery sidecar
    names that were uploaded more than ORPHAN_AFTER_S ago."""

    def upload(shade: int) -> str:
        answer = client.post("/api/generate/references", files=[("f", ("r.png", _png(shade)))])
        assert answer.status_code == 201, answer.text
        return answer.json()["references"][0]["id"]

    old = [upload(i) for i in range(5)]
    folder = settings.home / "gallery" / "references"
    # a gallery image rendered with old[0] (its sidecar, as generation writes it) and a damaged one naming old[1]
    (settings.home / "gallery" / "img.json").write_text(json.dumps({"prompt": "p", "references": [old[0]]}))
    (settings.home / "gallery" / "bad.json").write_text('{"references": ["' + old[1] + '", ')
    (folder / ".killed.png.partial").write_bytes(b"x")  # an upload killed mid-write
    long_ago = time.time() - ORPHAN_AFTER_S - 60
    for path in folder.iterdir():
        os.utime(path, (long_ago, long_ago))
    later = host_now() + ORPHAN_AFTER_S + 60  # the uploads' boot-clock ages too (file_age.BootLedger)
    monkeypatch.setattr(file_age, "host_now", lambda: later)
    fresh = upload(200)
    assert sorted(p.name for p in folder.iterdir() if p.name != USES) == sorted([old[0], old[1], fresh])
    assert client.get(f"/gallery/references/{old[0]}").status_code == 200
