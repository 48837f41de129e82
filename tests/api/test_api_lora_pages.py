"""GET /api/loras a page at a time (RELIABILITY 1280): `limit` and `cursor` as GET /api/runs,
`total`, and the Generate picker's server-side filters, `q` (a name's part, any case) and `name`
(exact names); only the page's LoRAs are read in full. Tiny folders of 8-byte "LoRAs": the list
reads their sidecars and stats, never their tensors."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.api.routes import loras as loras_route
from lorastudio.jobs.records import JobStatus
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings

# (name, family, recorded by a run): the store's order is the list's, newest last here
LORAS = [("cats", "flux"), ("dogs", "flux"), ("xl-cats", "sdxl"), ("Bobcat", "flux"), ("owls", "flux")]
BY_HAND = ("hand-copied", "flux")  # no run recorded it: after the recorded ones, by its mtime


def _lora(outputs: Path, name: str, family: str) -> None:
    folder = outputs / name
    folder.mkdir(parents=True)
    (folder / f"{name}.safetensors").write_bytes(b"\0" * 8)
    (folder / f"{name}.json").write_text(json.dumps({"family": family, "steps": 4}), encoding="utf-8")


def _record(settings: Settings, name: str) -> None:
    store = RunStore.open(settings.db_path, recover=False)
    try:
        store.create_run(name, name, "flux", {"steps": 4, "output_name": name}, "2026-12-01T00:00:00+00:00",
                         status=JobStatus.COMPLETED)  # fmt: skip
    finally:
        store.close()


@pytest.fixture
def lora_client(settings: Settings) -> Iterator[TestClient]:
    settings.ensure_dirs()
    for name, family in LORAS:
        _lora(settings.outputs_dir, name, family)
        _record(settings, name)
    _lora(settings.outputs_dir, *BY_HAND)
    with TestClient(create_app(settings), base_url=LOOPBACK) as client:
        yield client


def _walk(client: TestClient, params: dict[str, Any], between: Any = None) -> list[str]:
    names: list[str] = []
    ask = dict(params)
    while True:
        answer = client.get("/api/loras", params=ask)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert len(body["loras"]) <= params["limit"]
        names += [lora["name"] for lora in body["loras"]]
        if body["next_cursor"] is None:
            return names
        if between is not None:
            between(len(names))
        ask = {**params, "cursor": body["next_cursor"]}


def test_the_lora_list_pages_with_a_cursor_and_counts_every_lora(lora_client: TestClient) -> None:
    """Before, GET /api/loras answered every LoRA of the family at once (a home of 2,000: ~780 KB
    and ~0.3 s of the server's CPU per Generate page view) and took no `limit` or `cursor`."""
    everything = lora_client.get("/api/loras").json()  # an old client's request: the first page, all here
    newest_first = ["owls", "Bobcat", "xl-cats", "dogs", "cats", "hand-copied"]
    assert [lora["name"] for lora in everything["loras"]] == newest_first
    assert everything["total"] == 6 and everything["next_cursor"] is None
    flux = lora_client.get("/api/loras", params={"family": "flux", "limit": 2}).json()
    assert [lora["name"] for lora in flux["loras"]] == ["owls", "Bobcat"] and flux["total"] == 5
    assert _walk(lora_client, {"family": "flux", "limit": 2}) == [n for n in newest_first if n != "xl-cats"]
    assert _walk(lora_client, {"limit": 1}) == newest_first


def test_the_lora_list_filters_by_a_part_of_the_name_and_by_names(lora_client: TestClient) -> None:
    cats = lora_client.get("/api/loras", params={"family": "flux", "q": "CAT"}).json()
    assert [lora["name"] for lora in cats["loras"]] == ["Bobcat", "cats"] and cats["total"] == 2
    assert _walk(lora_client, {"q": "cat", "limit": 1}) == ["Bobcat", "xl-cats", "cats"]
    picked = lora_client.get("/api/loras", params=[("family", "flux"), ("name", "cats"), ("name", "hand-copied"),
                                                   ("name", "xl-cats"), ("name", "gone")]).json()  # fmt: skip
    assert [lora["name"] for lora in picked["loras"]] == ["cats", "hand-copied"]  # xl-cats is sdxl's
    assert picked["loras"][0]["files"][0]["url"] == "/api/loras/cats/file"


def test_a_lora_made_or_deleted_between_pages_repeats_or_skips_none(
    lora_client: TestClient, settings: Settings
) -> None:
    def change(shown: int) -> None:
        if shown != 2:
            return
        _lora(settings.outputs_dir, "late", "flux")  # the newest: before every page
        _record(settings, "late")
        assert lora_client.delete("/api/runs/dogs").status_code == 200  # one of the next page

    names = _walk(lora_client, {"family": "flux", "limit": 2}, change)
    assert names == ["owls", "Bobcat", "cats", "hand-copied"]


def test_a_lora_whose_newest_record_is_deleted_between_pages_keeps_its_place(
    lora_client: TestClient, settings: Settings
) -> None:
    """RELIABILITY 1342: the deleted record's LoRA moved among the folders no run recorded (by
    mtime) and was listed again on a later page ("Bobcat" twice)."""

    def change(shown: int) -> None:
        if shown == 2:
            answer = lora_client.delete("/api/runs/Bobcat", params={"keep_files": "true"})
            assert answer.status_code == 200, answer.text

    names = _walk(lora_client, {"family": "flux", "limit": 2}, change)
    assert names == ["owls", "Bobcat", "dogs", "cats", "hand-copied"]
    assert _walk(lora_client, {"family": "flux", "limit": 2}) == names  # its place stays


def test_only_the_pages_loras_are_read_in_full(
    lora_client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    read: list[str] = []
    real = loras_route.final_files

    def counted(run_dir: Path) -> list[dict[str, Any]]:
        read.append(run_dir.name)
        return real(run_dir)

    monkeypatch.setattr(loras_route, "final_files", counted)
    body = lora_client.get("/api/loras", params={"limit": 2}).json()
    assert read == ["owls", "Bobcat"] and body["total"] == 6


def test_an_unrecorded_loras_place_is_its_mtime_and_a_bad_cursor_is_a_422(
    lora_client: TestClient, settings: Settings
) -> None:
    _lora(settings.outputs_dir, "older-hand", "flux")
    old = settings.outputs_dir / "older-hand" / "older-hand.safetensors"
    os.utime(old, (1_000_000, 1_000_000))
    assert _walk(lora_client, {"limit": 4})[-2:] == ["hand-copied", "older-hand"]
    for cursor in ("abc", "r1", "x1:cats", "r1:a/b", "r" + "1" * 21 + ":cats"):
        assert lora_client.get("/api/loras", params={"cursor": cursor}).status_code == 422, cursor
