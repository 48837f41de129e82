"""Two editors of one caption (two tabs, two people): an edit names the caption it started from
(`expected`), and one made over a caption changed since is refused with 409 and the caption there
now, instead of silently overwriting the other edit. Without `expected` the edit is applied as
before (the CLI, scripts)."""

from __future__ import annotations

from pathlib import Path

from api_helpers import upload_folder
from fastapi.testclient import TestClient


def _caption(client: TestClient, file: str) -> str | None:
    return next(f for f in client.get("/api/datasets/shapes").json()["files"] if f["file"] == file)["caption"]


def test_an_edit_over_a_caption_changed_since_is_refused_with_the_current_one(
    client: TestClient, sample_dataset: Path
) -> None:
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    loaded = _caption(client, "shape_00.png")
    url = "/api/datasets/shapes/captions/shape_00.png"
    first = client.put(url, json={"caption": "tab one's words", "expected": loaded})
    assert first.status_code == 200, first.text
    second = client.put(url, json={"caption": "tab two's words", "expected": loaded})
    assert second.status_code == 409, second.text
    assert second.json()["error"] == "CaptionConflict"
    assert second.json()["current"] == "tab one's words"
    assert "changed since" in second.json()["detail"]
    assert _caption(client, "shape_00.png") == "tab one's words"  # nothing overwritten
    # keeping one's own words: the edit names the caption it now knows
    kept = client.put(url, json={"caption": "tab two's words", "expected": " tab one's words "})
    assert kept.status_code == 200 and _caption(client, "shape_00.png") == "tab two's words"
    # a caption removed meanwhile is "" to compare; an edit without `expected` is applied as is
    assert client.put(url, json={"caption": ""}).status_code == 200
    stale = client.put(url, json={"caption": "again", "expected": "tab two's words"})
    assert stale.status_code == 409 and stale.json()["current"] == ""
    assert client.put(url, json={"caption": "again", "expected": ""}).status_code == 200
