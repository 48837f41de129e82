"""A trigger word and a caption that spell an accent differently (NFC "é" typed in a config, NFD
"e" + U+0301 in a caption saved from macOS names or a tool that decomposes) are one word to every
rule that looks for the trigger in a caption (RELIABILITY 1030): the caption's trigger prefix,
tag dropout's exemption, preservation's replacement and its config check."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import numpy as np

from lorastudio.config_preservation import _has_word
from lorastudio.data import scan_dataset
from lorastudio.data.caption_variants import CaptionStyle, caption_variant, split_tags
from lorastudio.data.preservation_texts import replace_trigger

NFC = "café"
NFD = unicodedata.normalize("NFD", NFC)


def test_a_caption_in_nfd_already_starting_with_the_trigger_gets_it_once(tmp_path: Path, make_image) -> None:
    make_image(tmp_path / "a.png")
    make_image(tmp_path / "b.png")
    (tmp_path / "a.txt").write_text(f"{NFD}, a cup on a table", encoding="utf-8")
    (tmp_path / "b.txt").write_text(f"{NFD}s at night", encoding="utf-8")  # another word
    got = {
        it.path.name: it.caption
        for it in scan_dataset(tmp_path, resolution=64, multiple=16, trigger_word=NFC).items
    }
    assert got == {"a.png": f"{NFD}, a cup on a table", "b.png": f"{NFC}, {NFD}s at night"}
    # a trigger that is the first letters of the NFD word is no whole word of it
    shorter = scan_dataset(tmp_path, resolution=64, multiple=16, trigger_word="cafe").items
    assert [it.caption for it in shorter][0] == f"cafe, {NFD}, a cup on a table"


def test_tag_dropout_never_drops_the_trigger_spelt_in_nfd() -> None:
    style = CaptionStyle(tag_dropout=0.95, trigger=NFC)
    rng = np.random.default_rng(3)
    for _ in range(30):
        assert split_tags(caption_variant(f"{NFD}, red, round, shiny, small", style, rng))[0] == NFD


def test_preservation_replaces_the_trigger_spelt_in_nfd_and_its_check_finds_it() -> None:
    assert replace_trigger(f"a {NFD} cup", NFC, "dog") == "a dog cup"
    assert replace_trigger(f"a {NFD} cup", "cafe", "dog") == f"a {NFD} cup"  # not a whole word
    assert replace_trigger("a cup", NFC, "dog") == "a cup"
    assert _has_word(f"a {NFD}", NFC) and _has_word(f"a {NFC}", NFD) and not _has_word(f"a {NFD}", "cafe")
