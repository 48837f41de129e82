"""JSON nested deeper than the parser goes is bad JSON like any other (lorastudio.json_read;
RELIABILITY 483): one such line in a dataset's metadata.jsonl, or a gallery sidecar, costs its
own line or fields, not a 500 for the whole listing; and every json.loads of the package goes
through json_read.loads but for the readers that handle RecursionError themselves."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from live_server import LOOPBACK
from lorastudio import json_read
from lorastudio.api.app import create_app
from lorastudio.settings import get_settings

DEEP = "[" * 5000 + "]" * 5000
SRC = Path(__file__).resolve().parents[2] / "src" / "lorastudio"
# readers that catch RecursionError themselves (each names it in its own message or handling)
OWN_HANDLING = {
    "json_read.py",
    "json_keys.py",
    "jobs/caption_count.py",
    "lora/header.py",
    "lora/header_read.py",
    "basemodels/jsonfile.py",
    "api/body_checks.py",
    "jobs/caption_records.py",
}


def test_nesting_too_deep_is_a_json_decode_error() -> None:
    with pytest.raises(json.JSONDecodeError, match="nested deeper"):
        json_read.loads(DEEP)
    with pytest.raises(ValueError):
        json_read.loads(DEEP.encode())
    assert json_read.loads('{"a": [1]}') == {"a": [1]}


def test_every_json_loads_of_the_package_goes_through_json_read() -> None:
    direct = sorted(
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if re.search(r"\bjson\.loads\(", path.read_text(encoding="utf-8"))
        and str(path.relative_to(SRC)) not in OWN_HANDLING
    )
    assert direct == []


def test_a_deeply_nested_metadata_line_or_sidecar_costs_its_own_entry_not_the_listing() -> None:
    settings = get_settings().ensure_dirs()
    folder = settings.datasets_dir / "ds"
    folder.mkdir()
    Image.new("RGB", (32, 32)).save(folder / "a.png")
    (folder / "metadata.jsonl").write_text(
        f'{{"file_name": "a.png", "text": "hi"}}\n{DEEP}\n', encoding="utf-8"
    )
    gallery = settings.home / "gallery"
    gallery.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8)).save(gallery / "x.png")
    (gallery / "x.json").write_text(DEEP, encoding="utf-8")
    with TestClient(create_app(settings), base_url=LOOPBACK) as client:
        listed = client.get("/api/datasets")
        assert listed.status_code == 200, listed.text  # the old code: 500
        one = client.get("/api/datasets/ds")
        assert one.status_code == 200, one.text
        assert "nested deeper" in one.text  # the bad line is named, the good one read
        images = client.get("/api/gallery")
        assert images.status_code == 200, images.text  # the old code: 500
        assert [i["file"] for i in images.json()["images"]] == ["x.png"]
