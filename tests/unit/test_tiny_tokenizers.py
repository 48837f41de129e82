"""The tiny tokenizers: real classes, deterministic layout, prompt templates the pipelines rely on."""

from __future__ import annotations

from collections import Counter

import pytest

from lorastudio.tiny import tokenizers as toks
from lorastudio.tiny.dataset import sample_items


@pytest.fixture(scope="module")
def tokenizers() -> dict[str, object]:
    return {"clip": toks.clip_tokenizer(), "t5": toks.t5_tokenizer(), "qwen": toks.qwen_tokenizer()}


def test_bpe_merges_break_ties_by_string_order():
    words = Counter({("c", "d"): 1, ("a", "b"): 1, ("x", "y", "x", "y"): 1})
    # ("x","y") occurs twice; the two single pairs tie and go in string order
    assert toks.learn_bpe_merges(words, max_merges=10) == [("x", "y"), ("a", "b"), ("c", "d"), ("xy", "xy")]
    assert toks.learn_bpe_merges(words, max_merges=2) == [("x", "y"), ("a", "b")]


def test_the_real_tokenizer_classes_are_used(tokenizers):
    assert [type(t).__name__ for t in tokenizers.values()] == [
        "CLIPTokenizer",
        "T5Tokenizer",
        "Qwen2Tokenizer",
    ]
    assert tokenizers["clip"].model_max_length == 77
    assert toks.clip_tokenizer(pad_token="!").pad_token == "!"


@pytest.mark.parametrize("name", ["clip", "t5", "qwen"])
def test_every_caption_word_is_one_token_and_text_round_trips(tokenizers, name):
    tok = tokenizers[name]
    for item in sample_items(seed=0):
        words = item.caption.split()
        ids = tok(item.caption, add_special_tokens=False).input_ids
        assert len(ids) == len(words), (item.caption, tok.convert_ids_to_tokens(ids))
        assert tok.decode(ids, skip_special_tokens=True).strip() == item.caption


@pytest.mark.parametrize("name", ["clip", "t5", "qwen"])
def test_unseen_text_still_tokenizes(tokenizers, name):
    tok = tokenizers[name]
    ids = tok("Zebra-like xylophone 42", add_special_tokens=False).input_ids
    assert len(ids) > 3
    assert tok.unk_token_id not in ids


def test_qwen_image_template_prefix_matches_the_pipeline_drop_index():
    from lorastudio.tiny import build_tiny_pipeline

    pipe = build_tiny_pipeline("qwen-image")
    drop = pipe.prompt_template_encode_start_idx  # leading hidden states the pipeline discards
    assert pipe.prompt_template_encode == toks.QWEN_IMAGE_TEMPLATE
    prefix = toks.QWEN_IMAGE_TEMPLATE.split("{}")[0]
    assert len(pipe.tokenizer(prefix).input_ids) == drop
    full = pipe.tokenizer(toks.QWEN_IMAGE_TEMPLATE.format("a red circle")).input_ids
    assert pipe.tokenizer.decode(full[drop:]).startswith("a red circle<|im_end|>")


def test_qwen_specials_and_chat_template(tokenizers):
    tok = tokenizers["qwen"]
    ids = tok.convert_tokens_to_ids(list(toks.QWEN_SPECIALS))
    assert ids == list(range(ids[0], ids[0] + len(ids)))  # contiguous, in the real order
    assert tok.pad_token == "<|endoftext|>"
    text = tok.apply_chat_template(
        [{"role": "user", "content": "a red circle"}],
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=True,
    )
    assert text == "<|im_start|>user\na red circle<|im_end|>\n<|im_start|>assistant\n"
    assert tok(text).input_ids[0] == tok.convert_tokens_to_ids("<|im_start|>")


def test_the_layout_does_not_depend_on_caches():
    first = toks.clip_tokenizer().get_vocab()
    toks._clip_vocab_merges.cache_clear()
    assert toks.clip_tokenizer().get_vocab() == first
