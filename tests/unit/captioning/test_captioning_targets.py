"""What gets captioned and where a caption goes (no model): plan, clean, .txt, metadata.jsonl."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.captioning.plan import plan_captions
from lorastudio.captioning.targets import clean_caption, store_caption
from lorastudio.data.captions import MAX_CAPTION_BYTES


def test_plan_skips_captioned_unless_overwrite(make_dataset: Callable[..., Path]) -> None:
    folder = make_dataset(captions={"red": "a red card", "green": "   "})  # a blank .txt is no caption
    plan = plan_captions(folder, overwrite=False)
    assert [p.name for p in plan.todo] == ["blue.png", "green.png", "white.png"]
    assert (plan.skipped, plan.store) == (["red.png"], "txt")
    assert len(plan_captions(folder, overwrite=True).todo) == 4


def test_metadata_store_keeps_other_keys(make_dataset: Callable[..., Path]) -> None:
    folder = make_dataset()
    rows = [
        {"file_name": "red.png", "text": "a red card", "repeats": 3},
        {"file_name": "blue.png", "text": ""},
    ]
    (folder / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    plan = plan_captions(folder, overwrite=False)
    assert plan.store == "metadata" and plan.skipped == ["red.png"]
    store_caption(folder, folder / "blue.png", "a blue card", plan.store)
    store_caption(folder, folder / "white.png", "a white card", plan.store)
    store_caption(folder, folder / "red.png", "new red", plan.store)
    got = [json.loads(line) for line in (folder / "metadata.jsonl").read_text(encoding="utf-8").splitlines()]
    assert got == [
        {"file_name": "red.png", "text": "new red", "repeats": 3},
        {"file_name": "blue.png", "text": "a blue card"},
        {"file_name": "white.png", "text": "a white card"},
    ]
    assert not list(folder.glob("*.txt")) and not list(folder.glob(".*"))


def test_txt_store_is_atomic_and_replaces(make_dataset: Callable[..., Path]) -> None:
    folder = make_dataset(captions={"red": "old"})
    store_caption(folder, folder / "red.png", "new", "txt")
    assert (folder / "red.txt").read_text(encoding="utf-8") == "new\n"
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]


def test_clean_caption() -> None:
    assert clean_caption("  a red\n\tball\x0f. ", "sks") == "sks, a red ball ."
    assert clean_caption("sks holding a ball", "sks") == "sks holding a ball"  # not doubled
    at_cap = "é" * (MAX_CAPTION_BYTES // 2)
    assert clean_caption(at_cap) == at_cap  # whole, never cut (refused past it: test_caption_audit)
    with pytest.raises(ValueError, match="empty caption"):
        clean_caption("\x00 \n")


def test_fit_pixels_keeps_small_images_and_shrinks_large_ones() -> None:
    from PIL import Image

    from lorastudio.captioning.run import MAX_PIXELS, fit_pixels

    small = Image.new("RGB", (640, 480))
    assert fit_pixels(small) is small
    big = fit_pixels(Image.new("RGB", (4000, 3000)))
    assert big.width * big.height <= MAX_PIXELS and abs(big.width / big.height - 4 / 3) < 0.01


@pytest.mark.parametrize(
    ("prefix", "named"),
    [("sks\nman", "U+000A"), ("sks\x00", "U+0000"), ("\u202esks", "U+202E"), ("sks\u2028x", "U+2028")],
)
def test_a_prefix_that_would_break_the_caption_line_is_refused(prefix: str, named: str) -> None:
    """The prefix goes into every caption file as typed: a line break, NUL or a bidi override in
    it made a caption of two lines or one that reads backwards (clean_caption cleans the model's
    text, not the prefix). Refused by the options (CLI, API, worker), naming the character."""
    from pydantic import ValidationError

    from lorastudio.captioning.options import CaptionOptions

    with pytest.raises(ValidationError) as refused:
        CaptionOptions(model="m", prefix=prefix)
    assert named in str(refused.value) and "prefix" in str(refused.value)
    assert CaptionOptions(model="m", prefix="ohwx, man").prefix == "ohwx, man"
