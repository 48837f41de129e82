"""Cached text shards are checked against what the run's text encoders give (training/
text_signature.py): a shard with a valid crc32 but other tensor names, another dtype or shape,
or a non-finite value is a cache miss that is re-encoded (said once in the log), never a crash
or a silent wrong train; the variable token axis of an unpadded family is not a misfit."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
import torch

from lorastudio import families
from lorastudio.data.disk_cache import cache_root
from lorastudio.settings import get_settings
from lorastudio.training.inputs.latents_disk import read_shard, write_shard
from lorastudio.training.inputs.text_signature import (
    PROBE_TEXTS,
    learn_signature,
    misfit,
    read_signature,
    summarize,
)
from lorastudio.training.loop import train

SETTINGS = {"latent_cache": "disk", "steps": 3}


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


def _text_shards() -> list[Path]:
    return sorted((cache_root(get_settings()) / "text").rglob("*.safetensors"))


def _craft(shards: list[Path]) -> None:
    """Rewrite four caption shards with a valid crc32 (write_shard) but: other names, another
    sequence length, bf16, a NaN."""
    names, shape, dtype, nan = shards[:4]
    t = read_shard(names, required=())
    assert t is not None and set(t) == {"prompt_embeds", "pooled"}
    write_shard(names, {"embeds": t["prompt_embeds"], "pooled": t["pooled"]})
    t = read_shard(shape, required=())
    write_shard(shape, {"prompt_embeds": t["prompt_embeds"][:-3].contiguous(), "pooled": t["pooled"]})
    t = read_shard(dtype, required=())
    write_shard(dtype, {k: v.to(torch.bfloat16) for k, v in t.items()})
    t = read_shard(nan, required=())
    bad = t["prompt_embeds"].clone()
    bad[0, 0] = float("nan")
    write_shard(nan, {"prompt_embeds": bad, "pooled": t["pooled"]})


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "cached text embedding" in r.getMessage()
    ]


def test_crafted_text_shards_are_re_encoded_and_the_run_trains_the_same(
    make_config, text_encodes, caplog: pytest.LogCaptureFixture
) -> None:
    first = train(make_config(output_name="first", **SETTINGS), [].append, device="cpu")
    captions = [t for t in text_encodes if t not in PROBE_TEXTS]
    assert len(captions) == 4 and len(_text_shards()) == 4
    assert text_encodes[-2:] == list(PROBE_TEXTS)  # the signature is learnt with the cold encode...
    assert len(list(get_settings().text_signature_dir.glob("*.json"))) == 1
    text_encodes.clear()
    warm = train(make_config(output_name="warm", **SETTINGS), [].append, device="cpu")
    assert text_encodes == [] and warm.losses == first.losses  # ...then kept: no encoder load
    _craft(_text_shards())
    caplog.set_level(logging.WARNING)
    crafted = train(make_config(output_name="crafted", **SETTINGS), [].append, device="cpu")
    assert sorted(text_encodes) == sorted(captions)  # each crafted one re-encoded, once
    (said,) = _warnings(caplog)
    assert said.startswith("4 cached text embedding(s) in ") and "re-encoding them" in said
    assert crafted.losses == first.losses
    text_encodes.clear()
    caplog.clear()
    healed = train(make_config(output_name="healed", **SETTINGS), [].append, device="cpu")
    assert text_encodes == [] and _warnings(caplog) == [] and healed.losses == first.losses


def test_without_a_kept_signature_the_probe_finds_crafted_shards(make_config, text_encodes, caplog) -> None:
    first = train(make_config(output_name="first", **SETTINGS), [].append, device="cpu")
    captions = [t for t in text_encodes if t not in PROBE_TEXTS]
    _craft(_text_shards())
    for kept in get_settings().text_signature_dir.iterdir():
        kept.unlink()  # a home that never encoded with these encoders (the cache is shared)
    text_encodes.clear()
    caplog.set_level(logging.WARNING)
    crafted = train(make_config(output_name="crafted", **SETTINGS), [].append, device="cpu")
    # the probe captions with the encoders' first load, the crafted ones with a second
    assert text_encodes[:2] == list(PROBE_TEXTS) and sorted(text_encodes[2:]) == sorted(captions)
    assert len(_warnings(caplog)) == 1 and crafted.losses == first.losses


def test_a_variable_token_axis_is_learnt_not_a_misfit() -> None:
    short = {"prompt_embeds": torch.zeros(3, 8), "layout": torch.zeros(16, dtype=torch.bool)}
    long = {"prompt_embeds": torch.zeros(11, 8), "layout": torch.ones(16, dtype=torch.bool)}
    signature = learn_signature([short, long])
    assert signature == {"layout": ("bool", (16,)), "prompt_embeds": ("float32", (None, 8))}
    assert (
        misfit(
            summarize({"prompt_embeds": torch.ones(7, 8), "layout": torch.ones(16, dtype=torch.bool)}),
            signature,
        )
        is None
    )
    assert "shape" in misfit(
        summarize({"prompt_embeds": torch.ones(7, 9), "layout": long["layout"]}), signature
    )
    assert "shape" in misfit(
        summarize({"prompt_embeds": torch.ones(7, 8), "layout": torch.ones(15, dtype=torch.bool)}), signature
    )
    assert "non-finite" in misfit(
        summarize({"prompt_embeds": torch.full((2, 8), float("inf")), "layout": long["layout"]}), signature
    )
    assert learn_signature([short, {"prompt_embeds": torch.zeros(3, 8)}]) is None  # names differ


@pytest.mark.parametrize("family", ["qwen-image", "z-image", "krea2"])
def test_unpadded_families_reuse_their_shards(make_config, family: str, monkeypatch, caplog) -> None:
    """Captions of different token counts: the learnt signature leaves the token axis free."""
    cls = type(families.get(family))
    real, seen = cls.encode_prompts, []

    def recording(self, encoders, prompts, cfg, **kwargs):
        seen.extend(prompts)
        return real(self, encoders, prompts, cfg, **kwargs)

    monkeypatch.setattr(cls, "encode_prompts", recording)
    first = train(make_config(family, output_name="first", **SETTINGS), [].append, device="cpu")
    for kept in get_settings().text_signature_dir.iterdir():
        kept.unlink()  # learnt again by the warm run, from probes only: its shards are then checked
    seen.clear()
    caplog.set_level(logging.WARNING)
    warm = train(make_config(family, output_name="warm", **SETTINGS), [].append, device="cpu")
    assert sorted(seen) == sorted(PROBE_TEXTS) and _warnings(caplog) == []
    assert warm.losses == first.losses
    (kept,) = get_settings().text_signature_dir.glob("*.json")
    assert "null" in kept.read_text()  # a variable dim


def _skew(record: Path) -> None:
    """Rewrite a kept signature with another fixed dim (what an older lorastudio, whose encoder
    gave another form, or a damaged record leaves)."""
    kept = json.loads(record.read_text(encoding="utf-8"))
    kept["pooled"][1] = [d + 1 for d in kept["pooled"][1]]
    record.write_text(json.dumps(kept), encoding="utf-8")


def test_a_kept_signature_the_encoders_contradict_is_learnt_again(make_config, text_encodes, caplog) -> None:
    """RELIABILITY 350: every run refused "a text embedding shard vanished or was damaged" (restart
    the run: it re-encodes), again and again: its freshly encoded captions did not fit the kept
    signature. The encoders' own output is the truth: the signature is learnt again."""
    first = train(make_config(output_name="first", **SETTINGS), [].append, device="cpu")
    captions = [t for t in text_encodes if t not in PROBE_TEXTS]
    (record,) = get_settings().text_signature_dir.glob("*.json")
    learnt = record.read_text()
    _skew(record)
    text_encodes.clear()
    caplog.set_level(logging.WARNING)
    skewed = train(make_config(output_name="skewed", **SETTINGS), [].append, device="cpu")
    # every shard misfits the skewed record: re-encoded, then the probes with a second load
    assert sorted(text_encodes[:-2]) == sorted(captions) and text_encodes[-2:] == list(PROBE_TEXTS)
    assert any("learning it again" in r.getMessage() for r in caplog.records)
    assert record.read_text() == learnt and skewed.losses == first.losses
    text_encodes.clear()
    warm = train(make_config(output_name="warm", **SETTINGS), [].append, device="cpu")
    assert text_encodes == [] and warm.losses == first.losses


def test_a_kept_signature_that_is_a_fifo_or_huge_is_not_read(tmp_path: Path) -> None:
    """RELIABILITY 351: the record was opened like a plain file: a FIFO there held the run for ever."""
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert read_signature(fifo) is None  # returns at once: not opened for a writer to come
    huge = tmp_path / "huge.json"
    huge.write_text('{"pooled": ["float32", [32]]' + " " * (2 << 20) + "}")
    assert read_signature(huge) is None
    (tmp_path / "ok.json").write_text('{"pooled": ["float32", [32]]}')
    assert read_signature(tmp_path / "ok.json") == {"pooled": ("float32", (32,))}


@pytest.mark.parametrize("count", ["²", "1" * 5000, "-3"])
def test_a_crafted_token_count_is_no_count_never_a_crash(make_config, text_encodes, count: str) -> None:
    """RELIABILITY 358: a caption shard's token count (metadata, outside its crc32) of "²" (a digit
    to str.isdigit, not to int) or 5,000 digits (past int's 4,300) was a ValueError that ended the run."""
    from lorastudio.training.inputs.latents_disk import read_shard_entry

    first = train(make_config(output_name="first", **SETTINGS), [].append, device="cpu")
    shard = _text_shards()[0]
    found = read_shard_entry(shard, required=())
    assert found is not None and found[1]["caption_tokens"].isdigit()
    write_shard(shard, found[0], {"caption_tokens": count})
    text_encodes.clear()
    crafted = train(make_config(output_name="crafted", **SETTINGS), [].append, device="cpu")
    assert text_encodes == [] and crafted.losses == first.losses  # the shard is read, its count not
