"""Caption augmentation (data/caption_variants.py): the first keep_tokens tags stay in place,
tag dropout never drops the trigger word nor every tag, variants are a pure function of the
seed, and "[trigger]" places the trigger word (a caption with it and no trigger is refused)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lorastudio.data import scan_dataset
from lorastudio.data.caption_variants import CaptionStyle, caption_variant, caption_variants, split_tags
from lorastudio.errors import DatasetError

CAPTION = "sks, red, round, shiny, small, ball"


def test_shuffle_keeps_the_first_tags_and_every_tag() -> None:
    style = CaptionStyle(shuffle=True, keep_tokens=2)
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(30):
        tags = split_tags(caption_variant(CAPTION, style, rng))
        assert tags[:2] == ["sks", "red"] and sorted(tags) == sorted(split_tags(CAPTION))
        seen.add(tuple(tags))
    assert len(seen) > 5  # the other tags really move


def test_tag_dropout_drops_tags_but_never_the_trigger_nor_all() -> None:
    style = CaptionStyle(tag_dropout=0.9, trigger="sks")
    rng = np.random.default_rng(1)
    lengths = set()
    for _ in range(50):
        tags = split_tags(caption_variant(CAPTION, style, rng))
        assert "sks" in tags and tags == [t for t in split_tags(CAPTION) if t in tags]  # order kept
        lengths.add(len(tags))
    assert min(lengths) == 1 and max(lengths) < 6
    lone = CaptionStyle(tag_dropout=0.99)
    assert all(caption_variant("a, b", lone, rng) in ("a", "b") for _ in range(20))  # one always stays


def test_a_trigger_of_several_tags_keeps_each_of_them() -> None:
    """trigger_word "ohwx, man" puts two tags before the caption; dropout compared each tag with
    the whole "ohwx, man" and dropped either like any other tag."""
    style = CaptionStyle(tag_dropout=0.95, trigger="ohwx, man")
    rng = np.random.default_rng(2)
    for _ in range(50):
        tags = split_tags(caption_variant("ohwx, man, red, round, shiny, small", style, rng))
        assert tags[:2] == ["ohwx", "man"], tags


def test_variants_are_a_function_of_the_seed_and_inactive_styles_keep_the_caption() -> None:
    styles = [CaptionStyle(shuffle=True, keep_tokens=1), CaptionStyle()]
    a = caption_variants([CAPTION, "x, y"], styles, 4, seed=7)
    assert a == caption_variants([CAPTION, "x, y"], styles, 4, seed=7)
    assert a != caption_variants([CAPTION, "x, y"], styles, 4, seed=8)
    assert len(a[0]) == 4 and a[1] == ["x, y"]


def test_the_trigger_placeholder(tmp_path: Path) -> None:
    Image.new("RGB", (32, 32)).save(tmp_path / "a.png")
    (tmp_path / "a.txt").write_text("a photo of [trigger], smiling")
    scan = scan_dataset(tmp_path, resolution=32, multiple=16, trigger_word="ohwx")
    assert scan.items[0].caption == "a photo of ohwx, smiling"  # placed there, not prepended
    with pytest.raises(DatasetError, match=r"a.png: the caption has \[trigger\] but no trigger word is set"):
        scan_dataset(tmp_path, resolution=32, multiple=16)


def test_the_report_counts_variants_per_control_set_and_says_when_the_step_encodes(tmp_path: Path) -> None:
    """An edit family's conditioning is keyed by (text, controls): the report counts the variants
    of one caption once per control set; with train_text_encoder nothing is cached."""
    from dataclasses import replace

    from lorastudio.data.caption_variants import caption_report, scan_variants
    from lorastudio.data.items import DatasetScan
    from lorastudio.data.mix import MixEntry

    root = tmp_path / "d"
    root.mkdir()
    for name in ("a", "b"):
        Image.new("RGB", (64, 64)).save(root / f"{name}.png")
        (root / f"{name}.txt").write_text("red, round, shiny, small")
    scan = scan_dataset(root, resolution=64, multiple=16)
    entry = MixEntry(label="d", root=root, resolutions=(64,), shuffle_tags=True)
    items = [replace(it, controls=(root / f"c{i}.png",)) for i, it in enumerate(scan.items)]
    scan = DatasetScan(root, items, [], scan.fingerprint, entries=(entry,))
    plain = caption_report(scan, 4, 0)
    keyed = caption_report(scan, 4, 0, with_controls=True)
    variants = scan_variants(scan, 4, 0)
    assert plain["texts_encoded"] == len({v for vs in variants for v in vs})  # shared across images
    assert keyed["texts_encoded"] == sum(len(set(vs)) for vs in variants)  # once per control set
    assert "the 1 captions" in str(plain["cost"]) and "the 2 captions" in str(keyed["cost"])
    assert "nothing cached" in str(caption_report(scan, 4, 0, in_step=True)["cost"])


@pytest.mark.parametrize(
    ("caption", "style", "varies"),
    [
        ("sks, a red ball on grass", CaptionStyle(shuffle=True, keep_tokens=1), False),  # one tag after sks
        ("sks, a red ball on grass", CaptionStyle(shuffle=True), True),  # two tags swap
        ("sks, red, ball", CaptionStyle(shuffle=True, keep_tokens=1), True),
        ("a red ball on grass", CaptionStyle(tag_dropout=0.5), False),  # never dropped to nothing
        ("sks, ball", CaptionStyle(tag_dropout=0.5, trigger="sks"), True),  # "ball" may go
        ("sks", CaptionStyle(tag_dropout=0.5, keep_tokens=0, trigger="sks"), False),  # the trigger stays
        ("sks, ball", CaptionStyle(tag_dropout=0.5, keep_tokens=2), False),
        ("red, ball", CaptionStyle(), False),  # inactive
    ],
)
def test_can_vary_is_what_the_draws_give(caption: str, style: CaptionStyle, varies: bool) -> None:
    """can_vary (the preflight's warning) says exactly whether 200 draws ever change the caption."""
    from lorastudio.data.caption_variants import can_vary

    rng = np.random.default_rng(0)
    drawn = {caption_variant(caption, style, rng) for _ in range(200)}
    assert can_vary(caption, style) is varies is (drawn != {caption})


def test_the_preflight_names_images_whose_captions_no_draw_changes(tmp_path: Path) -> None:
    """shuffle_tags with keep_tokens = 1 on one-phrase captions: the trigger is kept and nothing
    is left to shuffle, so the setting changes nothing for those images, which are named."""
    from lorastudio.data.caption_variants import variation_warning
    from lorastudio.data.items import DatasetScan
    from lorastudio.data.mix import MixEntry

    for name, text in (("a", "a red ball on grass"), ("b", "red, round, shiny")):
        Image.new("RGB", (32, 32)).save(tmp_path / f"{name}.png")
        (tmp_path / f"{name}.txt").write_text(text)
    scan = scan_dataset(tmp_path, resolution=32, multiple=16, trigger_word="sks")
    entry = MixEntry(
        label="d", root=tmp_path, resolutions=(32,), shuffle_tags=True, keep_tokens=1, trigger_word="sks"
    )
    warning = variation_warning(DatasetScan(tmp_path, scan.items, [], scan.fingerprint, entries=(entry,)))
    assert (
        warning is not None
        and "change no caption of 1 of 2 image(s)" in warning
        and warning.endswith(": a.png")
    )
    unshuffled = MixEntry(label="d", root=tmp_path, resolutions=(32,))
    assert (
        variation_warning(DatasetScan(tmp_path, scan.items, [], scan.fingerprint, entries=(unshuffled,)))
        is None
    )


def test_a_caption_of_commas_only_is_trained_as_written_not_empty() -> None:
    """Session 26 caption audit: a caption with no tag (",, ,") joined no tags into "" under
    shuffle or dropout: the image trained unconditioned, as caption dropout does, unsaid."""
    import numpy as np

    from lorastudio.data.caption_variants import CaptionStyle, caption_variant

    for style in (
        CaptionStyle(shuffle=True),
        CaptionStyle(tag_dropout=0.5),
        CaptionStyle(shuffle=True, keep_tokens=1),
    ):
        assert caption_variant(",, ,", style, np.random.default_rng(0)) == ",, ,"
