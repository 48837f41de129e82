"""Caption counts for the families whose pipeline wraps the caption in a template (tiny models,
CPU): training/inputs/caption_length.caption_token_counts must say exactly how many tokens the
pipeline's own encode_prompt builds for a caption and where it cuts. Captions of one token under,
at and over the limit (by our count) go through the pipeline's encode_prompt; what its text
encoder reads of them (template prefix dropped) must be min(count, limit): the count is exact
and the cut falls where we say. Qwen-Image-Edit never cuts."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
import torch
from PIL import Image

from lorastudio import families
from lorastudio.training.events import DatasetWarnings, PlanChosen
from lorastudio.training.inputs.caption_length import caption_token_counts, cut_captions_note
from lorastudio.training.loop import train

TEMPLATED = ("qwen-image", "z-image", "flux2", "flux2-klein", "krea2")


def _encoders(name: str, tiny_model) -> Any:
    family = families.get(name)
    return family.load_text_encoders(str(tiny_model(name)), None, torch.float32, torch.device("cpu"))


def _read(name: str, encoders: Any, caption: str, limit: int) -> int:
    """How many of the caption's tokens (template included, dropped prefix not) the pipeline's
    encode_prompt hands on with max_sequence_length=limit."""
    fed: list[torch.Tensor] = []

    def grab(_module: Any, _args: Any, kwargs: dict[str, Any]) -> None:
        fed.append(kwargs["attention_mask"])

    hook = encoders.text_encoder.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        out = encoders.encode_prompt(prompt=[caption], device=torch.device("cpu"), max_sequence_length=limit)
    finally:
        hook.remove()
    if name == "qwen-image":  # the encoder reads it all; encode_prompt cuts its output
        embeds, mask = out
        return int(mask.sum()) if mask is not None else embeds.shape[1]
    if name == "z-image":  # (prompt embeds, negative ones): one [L, D] per prompt, padding removed
        return out[0][0].shape[0]
    if name == "krea2":  # [prefix | caption | PAD | suffix], the prefix dropped
        return int(out[1].sum())
    (mask,) = fed  # FLUX.2 / klein: padded to the limit; the mask says what is real
    return int(mask.sum())


def _captions_around(name: str, encoders: Any) -> tuple[int, dict[int, str]]:
    """A limit and captions whose counts are limit - 1, limit and limit + 1."""
    spec = families.get(name).spec
    words = [" ".join(["cat"] * k) for k in range(1, 60)]
    counts = caption_token_counts(spec, encoders, words)
    limit = counts[len(counts) // 2]
    by_count = {n: w for n, w in zip(counts, words, strict=True)}
    assert {limit - 1, limit, limit + 1} <= set(by_count), counts  # the premise
    return limit, {d: by_count[limit + d] for d in (-1, 0, 1)}


@pytest.mark.parametrize("name", TEMPLATED)
def test_the_count_and_cut_point_are_the_pipelines(name, tiny_model):
    encoders = _encoders(name, tiny_model)
    limit, captions = _captions_around(name, encoders)
    read = {d: _read(name, encoders, c, limit) for d, c in captions.items()}
    assert read == {-1: limit - 1, 0: limit, 1: limit}
    # the same captions under a roomier limit: nothing cut, so all the counted tokens are read
    assert _read(name, encoders, captions[1], limit + 8) == limit + 1


@pytest.mark.parametrize("name", TEMPLATED)
def test_the_plan_note_names_only_the_caption_past_the_limit(name, tiny_model, make_config, small_dataset):
    encoders = _encoders(name, tiny_model)
    limit, captions = _captions_around(name, encoders)
    spec = families.get(name).spec
    cfg = make_config(name, data_dir=str(small_dataset), max_sequence_length=limit)
    note = cut_captions_note(spec, cfg, encoders, list(captions.values()))
    assert note is not None and note.startswith("captions: 1 of 3 are longer than ")
    assert (
        f"the {limit} tokens {spec.title}'s text encoder reads (its prompt template's tokens included)"
        in note
    )
    assert f'"{captions[1][:60]}..." ({limit + 1} tokens)' in note  # 60 characters quoted
    assert cut_captions_note(spec, cfg, encoders, [captions[-1], captions[0]]) is None


def test_qwen_image_edit_never_cuts(tiny_model):
    spec = families.get("qwen-image-edit").spec
    assert spec.caption_tokens is not None and spec.caption_tokens.cuts is False
    encoders = _encoders("qwen-image-edit", tiny_model)
    long = " ".join(["cat"] * 1500)  # past every limit the other Qwen pipelines have (1024)
    whole = len(encoders.tokenizer(long)["input_ids"])
    image = Image.new("RGB", (64, 64), "red")  # the edit pipeline's template holds one image
    embeds, mask = encoders.encode_prompt(prompt=[long], image=[image], device=torch.device("cpu"))
    read = int(mask.sum()) if mask is not None else embeds.shape[1]
    assert read >= whole > 1024  # every caption token reaches the transformer
    with pytest.raises(ValueError, match="not measured"):
        caption_token_counts(spec, encoders, [long])


def test_every_family_says_how_its_captions_are_measured():
    for family in families.all_families():
        tokens = family.spec.caption_tokens
        assert tokens is not None, family.spec.name  # measured, or declared never cut
        assert tokens.cuts == (family.spec.name != "qwen-image-edit"), family.spec.name


@pytest.mark.parametrize("name", ["z-image", "krea2"])
def test_a_run_names_a_templated_familys_long_caption(name, make_config, small_dataset, tiny_model, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(small_dataset, data)
    long = ", ".join(f"tag{n} word{n}" for n in range(60))
    sorted(data.glob("*.txt"))[0].write_text(long + "\n")
    events: list = []
    train(make_config(name, data_dir=str(data), steps=1, max_sequence_length=32), events.append, device="cpu")
    (plan,) = [e for e in events if isinstance(e, PlanChosen)]
    assert not [n for n in plan.fallbacks if n.startswith("captions:")]  # a dataset warning (RELIABILITY 863)
    (note,) = [
        n
        for n in [e for e in events if isinstance(e, DatasetWarnings)][-1].warnings
        if n.startswith("captions:")
    ]
    (tokens,) = caption_token_counts(families.get(name).spec, _encoders(name, tiny_model), [long])
    title = families.get(name).spec.title
    assert (
        f"longer than the 32 tokens {title}'s text encoder reads (its prompt template's tokens included)"
        in note
    )
    assert f'"{long[:60]}..." ({tokens} tokens)' in note and note.endswith("or raise max_sequence_length")
