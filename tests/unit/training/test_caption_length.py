"""Captions longer than the text encoder reads (tiny SDXL and FLUX.1, CPU): the run's dataset warnings
name them with their token counts, measured independently here with the model's own tokenizer;
a run of short captions says nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

from transformers import AutoTokenizer

from lorastudio.training.events import DatasetWarnings, PlanChosen
from lorastudio.training.loop import train

LONG = ", ".join(f"tag{n} word{n}" for n in range(60))  # well past 77 CLIP / 16 T5 tokens


def _with_a_long_caption(small_dataset: Path, tmp_path: Path) -> Path:
    data = tmp_path / "data"
    shutil.copytree(small_dataset, data)
    sorted(data.glob("*.txt"))[0].write_text(LONG + "\n")
    return data


def _notes(events: list) -> list[str]:
    """The run's cut-caption notes: a dataset warning (its latest list: the record's), never a
    plan fallback (RELIABILITY 863)."""
    (plan,) = [e for e in events if isinstance(e, PlanChosen)]
    assert not [n for n in plan.fallbacks if n.startswith("captions:")]
    said = [e.warnings for e in events if isinstance(e, DatasetWarnings)]
    return [n for n in (said[-1] if said else []) if n.startswith("captions:")]


def test_an_sdxl_caption_past_77_tokens_is_named_with_its_length(
    make_config, small_dataset, tiny_model, tmp_path
):
    data = _with_a_long_caption(small_dataset, tmp_path)
    events: list = []
    train(make_config("sdxl", data_dir=str(data), steps=1), events.append, device="cpu")
    tokens = len(AutoTokenizer.from_pretrained(tiny_model("sdxl") / "tokenizer")(LONG)["input_ids"])
    assert tokens > 77  # the premise
    (note,) = _notes(events)
    assert note.startswith("captions: 1 of ")
    assert "longer than the 77 tokens Stable Diffusion XL's text encoder reads" in note
    assert f'"{LONG[:60]}..." ({tokens} tokens)' in note and note.endswith("; shorten them")


def test_a_flux_caption_past_max_sequence_length_is_named(make_config, small_dataset, tiny_model, tmp_path):
    data = _with_a_long_caption(small_dataset, tmp_path)
    events: list = []
    train(
        make_config("flux", data_dir=str(data), steps=1, max_sequence_length=32), events.append, device="cpu"
    )
    t5 = AutoTokenizer.from_pretrained(tiny_model("flux") / "tokenizer_2")
    tokens = len(t5(LONG)["input_ids"])
    (note,) = _notes(events)
    assert "longer than the 32 tokens FLUX.1's text encoder reads" in note and f"({tokens} tokens)" in note
    assert note.endswith("; shorten them or raise max_sequence_length")


def test_short_captions_say_nothing(make_config, small_dataset):
    events: list = []
    train(make_config("sdxl", steps=1), events.append, device="cpu")
    assert _notes(events) == []
