"""Phase 1 for a family whose prompt sees the controls (Qwen-Image-Edit): one conditioning per
(caption, controls), keyed by both, "" per control set under caption dropout, and the training
picks look the item's own key up."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np

from lorastudio.training.inputs.conditioning import CaptionPicker, EditPrompt, cond_key, edit_prompts


def _item(caption: str, *controls: str) -> SimpleNamespace:
    return SimpleNamespace(caption=caption, controls=tuple(Path(c) for c in controls), control_folder_ids=())


def test_one_caption_with_two_control_sets_is_two_conditionings():
    items = [_item("invert it", "c/a.png"), _item("invert it", "c/b.png"), _item("invert it", "c/a.png")]
    prompts = edit_prompts(items, caption_dropout=0.0)
    assert [(p.caption, p.controls) for p in prompts] == [
        ("invert it", (Path("c/a.png"),)),
        ("invert it", (Path("c/b.png"),)),
    ]
    assert len({p.key for p in prompts}) == 2 and cond_key("invert it") == "invert it"
    with_dropout = edit_prompts(items, caption_dropout=0.5)
    assert {(p.caption, p.controls[0].name) for p in with_dropout} == {
        ("invert it", "a.png"), ("invert it", "b.png"), ("", "a.png"), ("", "b.png"),
    }  # fmt: skip


def test_the_picker_keys_each_pick_with_the_items_controls():
    items = [_item("x", "c/a.png"), _item("y", "c/b.png", "c2/b.png")]
    picker = CaptionPicker(
        [it.caption for it in items], 0.5, np.random.default_rng(0), [it.controls for it in items]
    )
    picks = [picker.pick([0, 1]) for _ in range(20)]
    keys = {p.key for p in edit_prompts(items, 0.5)}
    assert {k for pair in picks for k in pair} == keys  # captions and "" each with their own controls
    plain = CaptionPicker(["x", "y"], 0.0, np.random.default_rng(0))
    assert plain.pick([1, 0]) == ["y", "x"]


def test_an_edit_prompt_reads_its_controls_and_fits_them(tmp_path):
    from PIL import Image

    Image.new("RGB", (40, 20), "red").save(tmp_path / "a.png")
    prompt = EditPrompt("x", (tmp_path / "a.png",))
    assert prompt.images()[0].size == (40, 20)
    fitted = EditPrompt("x", (tmp_path / "a.png",), fit=(16, 16)).images()[0]
    assert fitted.size == (16, 16) and fitted.getpixel((8, 8)) == (255, 0, 0)


def test_caption_variants_compose_with_the_controls():
    """Tag shuffle / dropout variants (data/caption_variants.py) of an edit dataset: each variant is
    encoded with its item's controls, "" only for the items whose entry drops captions, and every
    pick (a variant or "") is one of those keys."""
    items = [_item("a, b", "c/a.png"), _item("c, d", "c/b.png")]
    variants = [["a, b", "b, a"], ["c, d", "d, c"]]
    prompts = edit_prompts(items, [0.5, 0.0], variants)
    assert {(p.caption, p.controls[0].name) for p in prompts} == {
        ("a, b", "a.png"), ("b, a", "a.png"), ("c, d", "b.png"), ("d, c", "b.png"), ("", "a.png"),
    }  # fmt: skip
    picker = CaptionPicker(
        [v[0] for v in variants],
        [0.5, 0.0],
        np.random.default_rng(0),
        [it.controls for it in items],
        variants=variants,
    )
    picks = {k for _ in range(40) for k in picker.pick([0, 1])}
    assert picks == {p.key for p in prompts}  # every variant and the one "" are drawn, nothing else
