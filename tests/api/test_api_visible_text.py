"""The text a user gives that the studio writes into a caption file or an image's PNG text follows
text_rules.visible_text, as a config's trigger word, default caption and sample prompts do
(RELIABILITY 1033): a caption edit, a bulk edit's inserted texts and a generation's prompts
holding an ESC sequence, U+202E or a zero-width space are refused naming the character; CR LF is
stored as LF (what the caption reader gives back). Before, all were written as sent (a NUL prompt
into the PNG's tEXt chunk, which its readers cut there)."""

from __future__ import annotations

import shutil
from pathlib import Path

from fastapi.testclient import TestClient

from lorastudio.settings import Settings


def _shapes(settings: Settings, sample_dataset: Path) -> Path:
    settings.ensure_dirs()
    folder = settings.datasets_dir / "shapes"
    shutil.copytree(sample_dataset, folder)
    return folder


def test_a_caption_edit_takes_visible_text_only(
    client: TestClient, settings: Settings, sample_dataset: Path
) -> None:
    folder = _shapes(settings, sample_dataset)
    before = (folder / "shape_00.txt").read_bytes()
    for text, named in (("a\u202ecat", "U+202E RIGHT-TO-LEFT OVERRIDE"), ("a\x1b[2Jcat", "U+001B ESCAPE"),
                        ("a\u200bcat", "U+200B ZERO WIDTH SPACE")):  # fmt: skip
        answer = client.put("/api/datasets/shapes/captions/shape_00.png", json={"caption": text})
        assert answer.status_code == 400, answer.text
        assert answer.json()["problems"] == [
            f"shape_00.png: the caption must be visible text (line breaks allowed); it holds {named}"
        ]
        assert (folder / "shape_00.txt").read_bytes() == before
    kept = client.put(
        "/api/datasets/shapes/captions/shape_00.png", json={"caption": "two\r\nlines\tand a tab"}
    )
    assert kept.status_code == 200, kept.text
    assert kept.json()["caption"] == "two\nlines\tand a tab"
    assert (folder / "shape_00.txt").read_bytes() == b"two\nlines\tand a tab\n"


def test_a_bulk_edit_writes_visible_text_and_may_find_any(
    client: TestClient, settings: Settings, sample_dataset: Path
) -> None:
    folder = _shapes(settings, sample_dataset)
    answer = client.post("/api/datasets/shapes/captions", json={"prepend": "\x1b[31m", "append": "\u202e!"})
    assert answer.status_code == 400, answer.text
    assert [(p["field"], p["message"].rsplit("holds ", 1)[1]) for p in answer.json()["problems"]] == [
        ("prepend", "U+001B ESCAPE"),
        ("append", "U+202E RIGHT-TO-LEFT OVERRIDE"),
    ]
    (folder / "shape_01.txt").write_text("a\u200bcat", encoding="utf-8")  # a file's: removable by find
    cleaned = client.post("/api/datasets/shapes/captions", json={"find": "\u200b", "replace": " "})
    assert cleaned.status_code == 200, cleaned.text
    assert (folder / "shape_01.txt").read_text(encoding="utf-8") == "a cat\n"


def test_a_generation_prompt_takes_visible_text_only(client: TestClient) -> None:
    answer = client.post(
        "/api/generate",
        json={"family": "sdxl", "base_model": "/no/such/base", "prompt": "a\x00cat", "negative_prompt": "b\u202e",
              "width": 64, "height": 64, "steps": 2},
    )  # fmt: skip
    assert answer.status_code == 400, answer.text
    problems = {p["field"]: p["message"] for p in answer.json()["problems"]}
    assert problems["prompt"] == "must be visible text (line breaks allowed); it holds U+0000 NULL"
    assert problems["negative_prompt"].endswith("it holds U+202E RIGHT-TO-LEFT OVERRIDE")
