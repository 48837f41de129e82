"""Control images and loss masks uploaded through the API are decoded fully (RELIABILITY 166).

An upload's control (form field `control`, `control_2` ...) or mask (field `mask`) whose PNG
deflate stream ends early (valid chunks and CRCs: Pillow decodes it with rows black, saying
nothing) is refused naming the file; a good control is recorded in the dataset's decoded record
(data/decoded.py, keyed `control/<name>`), so no check decodes it again.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from lorastudio.data.decoded import DecodedRecord
from lorastudio.data.safe_open import folder_identity
from lorastudio.settings import Settings
from undecodable_images import idat_ends_early, noisy, record_full_decodes


@pytest.fixture
def full_decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files (folder/name) whose every pixel the process decodes (images._full_decode)."""
    return record_full_decodes(monkeypatch, with_folder=True)


def test_a_control_whose_stream_ends_early_is_refused_naming_it(
    client: TestClient, settings: Settings, full_decodes: list[str]
) -> None:
    files = [("f", (f"{s}.png", noisy("PNG", 32, seed=i))) for i, s in enumerate("ab")]
    files += [("f", (f"{s}.txt", f"noise {s}".encode())) for s in "ab"]
    files += [("control", ("a.png", noisy("PNG", 32, seed=5))), ("control", ("b.png", idat_ends_early(32)))]
    resp = client.post("/api/datasets/edits/files", files=files)
    assert resp.status_code == 201, resp.text
    refused = {r["file"]: r["reason"] for r in resp.json()["refused"]}
    assert list(refused) == ["control/b.png"], refused
    assert refused["control/b.png"].startswith("corrupt (PNG pixel data cut short"), refused
    folder = settings.datasets_dir / "edits"
    assert sorted(p.name for p in (folder / "control").iterdir()) == ["a.png"]
    # the good control is recorded under its own key, apart from the target a.png
    record = DecodedRecord.load(settings.decoded_record_dir, folder, folder_identity(folder))
    assert record.known(folder / "control" / "a.png") is not None
    assert record.known(folder / "a.png") is not None
    assert set(record.files) == {"a.png", "b.png", "control/a.png"}
    # each file decoded once, by the upload's check (in its staging folder)
    assert sorted(f.rsplit("/", 1)[-1] for f in full_decodes) == ["a.png", "a.png", "b.png", "b.png"]
    assert sum(f.startswith("control/") for f in full_decodes) == 2


def test_a_mask_whose_stream_ends_early_is_refused_naming_it(client: TestClient, settings: Settings) -> None:
    files = [("f", ("a.png", noisy("PNG", 32))), ("f", ("a.txt", b"noise"))]
    assert client.post("/api/datasets/masked/files", files=files).status_code == 201
    bad = idat_ends_early(32)  # RGB 32 x 32: the image's size, so only its pixels are wrong
    resp = client.post("/api/datasets/masked/files", files=[("mask", ("a.png", bad))])
    assert resp.status_code == 400, resp.text
    problems = resp.json()["problems"]
    assert any("a.png" in p and "PNG pixel data cut short" in p for p in problems), problems
    assert not (settings.datasets_dir / "masked" / "masks" / "a.png").exists()
