"""The preflight names the captions the text encoder would cut (jobs/caption_tokens.py), counted
torch-free with the base's tokenizer.json as the run's start counts them (fix 99), or its slow
files (a T5's spiece.model, CLIP's vocab.json + merges.txt: fix 593); other slow files get a plain
note that the count is made at the start."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from fastapi.testclient import TestClient

from lorastudio.cli.train_check import warnings
from lorastudio.settings import Settings
from slow_tokenizers import t5_spiece_only

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


def test_a_t5_of_spiece_model_alone_is_counted_and_other_slow_files_left_to_the_start(
    client: TestClient,
    settings: Settings,
    sample_dataset: Path,
    flux_config: Callable[..., dict],
    tiny_model: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    """RELIABILITY 593: a base whose T5 has spiece.model and no tokenizer.json (as some released
    FLUX.1 and Chroma repos ship it) had its count left to the start, its cut captions unnamed;
    it is counted with sentencepiece in the count's child. Slow files not counted here are
    still a note saying what the folder holds."""
    _shapes(settings, sample_dataset)
    base = shutil.copytree(tiny_model("flux"), tmp_path / "flux-slow")
    t5_spiece_only(base / "tokenizer_2")
    config = flux_config(base_model=str(base), max_sequence_length=64)  # its small vocabulary: long counts
    report = client.post("/api/train/preflight", json={"config": config})
    assert report.status_code == 200, report.text
    section = report.json()["dataset"]["caption_tokens"]
    assert section["counted"] is True and [c["file"] for c in section["cut"]] == ["shape_03.png"], section
    assert "1 of 8 captions are longer than the 64 tokens" in section["note"]
    (base / "tokenizer_2" / "spiece.model").unlink()  # tokenizer_config.json alone
    report = client.post("/api/train/preflight", json={"config": config})
    assert report.json()["dataset"]["caption_tokens"] == {
        "limit": 64,
        "counted": False,
        "cut": [],
        "note": "caption lengths are counted at the start of the run (tokenizer_2/ has no tokenizer.json, "
        "and its slow files (tokenizer_config.json, tokenizer_class T5Tokenizer) are not a T5 spiece.model "
        "or CLIP's vocab.json + merges.txt, which are counted here)",
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
