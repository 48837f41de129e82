"""The preflight names the captions the text encoder would cut (jobs/caption_tokens.py), counted
torch-free with the base's tokenizer.json as the run's start counts them (fix 99); a base whose
tokenizer has no tokenizer.json gets a plain note that the count is made at the start."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from fastapi.testclient import TestClient

from lorastudio.cli.train_check import warnings
from lorastudio.settings import Settings

LONG = "a red circle on a blue background, " + ", ".join(["sharp focus, high quality photo"] * 12)


def _shapes(settings: Settings, sample_dataset: Path) -> Path:
    settings.ensure_dirs()
    folder = settings.datasets_dir / "shapes"
    shutil.copytree(sample_dataset, folder)
    (folder / "shape_03.txt").write_text(LONG, encoding="utf-8")
    return folder


def test_the_preflight_names_a_cut_caption_with_its_count(
    client: TestClient, settings: Settings, sample_dataset: Path, flux_config: Callable[..., dict]
) -> None:
    _shapes(settings, sample_dataset)
    report = client.post("/api/train/preflight", json={"config": flux_config(max_sequence_length=32)})
    assert report.status_code == 200, report.text
    section = report.json()["dataset"]["caption_tokens"]
    assert section["limit"] == 32 and section["counted"] is True
    assert [c["file"] for c in section["cut"]] == ["shape_03.png"]
    tokens = section["cut"][0]["tokens"]
    assert tokens > 32
    assert f"shape_03.png ({tokens} tokens)" in section["note"]
    assert "1 of 8 captions are longer than the 32 tokens" in section["note"]
    assert f"{section['note']}: shape_03.png ({tokens})" in warnings(
        report.json()
    )  # `train --check` says it too
    roomy = client.post("/api/train/preflight", json={"config": flux_config(max_sequence_length=tokens)})
    assert roomy.json()["dataset"]["caption_tokens"] == {
        "limit": tokens,
        "counted": True,
        "cut": [],
        "note": None,
    }


def test_without_tokenizer_json_the_count_is_left_to_the_start(
    client: TestClient,
    settings: Settings,
    sample_dataset: Path,
    flux_config: Callable[..., dict],
    tiny_model: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    _shapes(settings, sample_dataset)
    base = shutil.copytree(tiny_model("flux"), tmp_path / "flux-slow")
    (base / "tokenizer_2" / "tokenizer.json").unlink()  # as a slow-only tokenizer's folder
    report = client.post(
        "/api/train/preflight", json={"config": flux_config(base_model=str(base), max_sequence_length=32)}
    )
    assert report.status_code == 200, report.text
    assert report.json()["dataset"]["caption_tokens"] == {
        "limit": 32,
        "counted": False,
        "cut": [],
        "note": "caption lengths are counted at the start of the run (tokenizer_2/ has no tokenizer.json "
        "(a slow-only tokenizer))",
    }


def test_a_fifo_tokenizer_json_leaves_the_count_to_the_start_without_hanging(
    client: TestClient,
    settings: Settings,
    sample_dataset: Path,
    flux_config: Callable[..., dict],
    tiny_model: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    """The Rust reader blocked on a FIFO holding the GIL: the whole server stopped (fix 136)."""
    _shapes(settings, sample_dataset)
    base = shutil.copytree(tiny_model("flux"), tmp_path / "flux-fifo")
    (base / "tokenizer_2" / "tokenizer.json").unlink()
    os.mkfifo(base / "tokenizer_2" / "tokenizer.json")
    report = client.post(
        "/api/train/preflight", json={"config": flux_config(base_model=str(base), max_sequence_length=32)}
    )
    assert report.status_code == 200, report.text
    section = report.json()["dataset"]["caption_tokens"]
    assert section["counted"] is False
    assert section["note"] == (
        "caption lengths are counted at the start of the run (tokenizer_2/tokenizer.json is not a regular file)"
    )
