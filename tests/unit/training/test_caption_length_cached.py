"""Captions the text encoder cuts are named by a run whose captions come from the on-disk text
cache as by one that encodes them (fix 99, RELIABILITY fix 147): each text shard keeps its
caption's token count (training/inputs/conditioning_disk.py). Tiny FLUX.1 on CPU, max_sequence_length 32.
A shard from before the counts were kept says it cannot tell, never a silent "nothing cut"."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from lorastudio import families
from lorastudio.data.disk_cache import cache_root
from lorastudio.settings import get_settings
from lorastudio.training.events import DatasetWarnings, PlanChosen
from lorastudio.training.inputs.latents_disk import read_shard_entry, write_shard
from lorastudio.training.loop import train

LONG = ", ".join(f"tag{n} word{n}" for n in range(60))  # well past 32 T5 tokens
SETTINGS = {"steps": 1, "max_sequence_length": 32}


@pytest.fixture
def text_encodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts the runs of a test encode (the FLUX.1 family's encode_prompts, recorded)."""
    cls = type(families.get("flux"))
    real, seen = cls.encode_prompts, []

    def recording(self, encoders, prompts, cfg, **kwargs):
        seen.extend(prompts)
        return real(self, encoders, prompts, cfg, **kwargs)

    monkeypatch.setattr(cls, "encode_prompts", recording)
    return seen


@pytest.fixture
def data(small_dataset: Path, tmp_path: Path) -> Path:
    out = tmp_path / "data"
    shutil.copytree(small_dataset, out)
    sorted(out.glob("*.txt"))[0].write_text(LONG + "\n")
    return out


def _cut_notes(make_config, data: Path, name: str, cache: str) -> list[str]:
    events: list = []
    cfg = make_config("flux", data_dir=str(data), output_name=name, latent_cache=cache, **SETTINGS)
    train(cfg, events.append, device="cpu")
    (plan,) = [e for e in events if isinstance(e, PlanChosen)]
    assert not [n for n in plan.fallbacks if n.startswith("captions:")]  # a dataset warning (RELIABILITY 863)
    said = [e.warnings for e in events if isinstance(e, DatasetWarnings)]
    return [n for n in (said[-1] if said else []) if n.startswith("captions:")]


def _text_shards() -> list[Path]:
    return sorted((cache_root(get_settings()) / "text").rglob("*.safetensors"))


def test_a_run_from_the_text_cache_names_the_same_cut_captions(make_config, data, tiny_model, text_encodes):
    tokens = len(AutoTokenizer.from_pretrained(tiny_model("flux") / "tokenizer_2")(LONG)["input_ids"])
    (uncached,) = _cut_notes(make_config, data, "memory", "memory")  # encoded: the note of fix 99
    assert f'"{LONG[:60]}..." ({tokens} tokens)' in uncached and "captions: 1 of " in uncached
    (first,) = _cut_notes(make_config, data, "first", "disk")  # encoded, the shards written
    assert first == uncached and _text_shards()
    text_encodes.clear()
    (cached,) = _cut_notes(make_config, data, "cached", "disk")
    assert text_encodes == []  # every caption from the cache: no encoder loaded
    assert cached == uncached  # the same captions named, with their counts
    sorted(data.glob("*.txt"))[1].write_text("a new caption")  # one encoded, the long one cached
    (mixed,) = _cut_notes(make_config, data, "mixed", "disk")
    assert text_encodes == ["a new caption"] and f'"{LONG[:60]}..." ({tokens} tokens)' in mixed
    assert "captions: 1 of " in mixed  # of every caption, not only those encoded now


def test_shards_without_a_count_say_the_run_cannot_tell(make_config, data, text_encodes):
    (first,) = _cut_notes(make_config, data, "first", "disk")
    for shard in _text_shards():  # as written before the counts were kept
        tensors, metadata = read_shard_entry(shard, required=())
        assert metadata["caption_tokens"].isdigit()
        write_shard(shard, tensors)
        assert "caption_tokens" not in read_shard_entry(shard, required=())[1]
    text_encodes.clear()
    (old,) = _cut_notes(make_config, data, "old", "disk")
    assert text_encodes == []
    captions = len(_text_shards())
    assert old.startswith(f"captions: {captions} of {captions} not measured: their cached text embeddings")
    sorted(data.glob("*.txt"))[1].write_text("a new caption")  # the encoders load: they count every caption
    (counted,) = _cut_notes(make_config, data, "counted", "disk")
    assert counted == first  # the same note as when the shards were written, nothing unmeasured


def test_short_cached_captions_say_nothing(make_config, text_encodes):
    events: list = []
    encoded = []
    for name in ("a", "b"):
        cfg = make_config("flux", output_name=name, latent_cache="disk", **SETTINGS)
        train(cfg, events.append, device="cpu")
        encoded.append(len(text_encodes))
    assert encoded[0] > 0 and encoded[1] == encoded[0]  # the second run from the cache
    plans = [e for e in events if isinstance(e, PlanChosen)]
    assert len(plans) == 2 and not [n for p in plans for n in p.fallbacks if n.startswith("captions:")]
    said = [w for e in events if isinstance(e, DatasetWarnings) for w in e.warnings]
    assert not [n for n in said if n.startswith("captions:")]
