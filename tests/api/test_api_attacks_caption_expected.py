"""Attacks on a caption edit's `expected` (PUT /api/datasets/<name>/captions/<file>): not a
string, huge, holding a NUL, and twenty edits from the same starting caption at once. Each is
answered (422 / 409) without writing, and of the racing edits exactly one is applied, whole."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from api_helpers import upload_folder
from fastapi.testclient import TestClient

URL = "/api/datasets/shapes/captions/shape_00.png"


def _caption(client: TestClient) -> str | None:
    files = client.get("/api/datasets/shapes").json()["files"]
    return next(f for f in files if f["file"] == "shape_00.png")["caption"]


def test_odd_expected_values_write_nothing(client: TestClient, sample_dataset: Path) -> None:
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    before = _caption(client)
    for expected in (5, True, ["a"], {"a": 1}, "x" * 10_001):
        resp = client.put(URL, json={"caption": "pwned", "expected": expected})
        assert resp.status_code == 422, (expected, resp.status_code)
    for expected in (f"{before}\x00", "\x00", f"{before} and more"):
        resp = client.put(URL, json={"caption": "pwned", "expected": expected})
        assert resp.status_code == 409 and resp.json()["current"] == before, resp.text
    assert _caption(client) == before


def test_racing_edits_from_one_caption_apply_exactly_one(client: TestClient, sample_dataset: Path) -> None:
    assert upload_folder(client, "shapes", sample_dataset).status_code == 201
    before = _caption(client) or ""
    with ThreadPoolExecutor(8) as pool:
        answers = list(
            pool.map(lambda i: client.put(URL, json={"caption": f"edit {i}", "expected": before}), range(20))
        )
    codes = sorted(r.status_code for r in answers)
    assert codes.count(200) == 1 and set(codes) == {200, 409}, codes
    winner = next(r.json()["caption"] for r in answers if r.status_code == 200)
    assert _caption(client) == winner
    assert all(
        r.json()["current"] == winner for r in answers if r.status_code == 409 and "current" in r.json()
    )
