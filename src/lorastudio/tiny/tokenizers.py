"""Tiny, deterministic tokenizers of the real transformers classes, built in memory (no hub files).

- `clip_tokenizer()`  CLIPTokenizer, byte-level BPE with "</w>" word ends (SDXL, FLUX.1)
- `t5_tokenizer()`    T5Tokenizer, Unigram in the T5 layout (FLUX.1)
- `qwen_tokenizer()`  Qwen2Tokenizer, byte-level BPE + Qwen special tokens + a Qwen3-style chat
                      template (Qwen-Image's Qwen2.5-VL, Z-Image's Qwen3)

Determinism: the `tokenizers` trainers assign ids differently from one process to the next, so
none is used. BPE merges are learned here by a plain loop with a total order on ties, and the
vocabulary is laid out explicitly (bytes, then one token per merge, then specials). The same call
gives the same ids in every process.

The training text covers the sample dataset's captions and every word of the Qwen-Image prompt
template, so that template's prefix is exactly as many tokens (34) as with the real Qwen vocab:
QwenImagePipeline drops that many leading hidden states.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import CLIPTokenizer, Qwen2Tokenizer, T5Tokenizer

COLOURS: tuple[str, ...] = (
    "red",
    "green",
    "blue",
    "yellow",
    "orange",
    "purple",
    "pink",
    "cyan",
    "white",
    "black",
    "gray",
    "brown",
)
SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "diamond", "ring", "cross", "star", "stripe")
_WORDS_TEXT = (
    "a an the on of with in near over under and or by at to is are this that photo painting drawing "
    "sketch render image picture background foreground small large big tiny huge bright dark soft "
    "shiny plain simple flat solid colourful colorful style art digital oil watercolor high low "
    "quality blurry sharp focus cat dog bird tree house car flower sky cloud sun moon river "
    "mountain city forest ocean portrait landscape person man woman face dance monkey squirrel "
    "eating burger sitting standing flying shape shapes object objects centre center left right "
    "top bottom corner middle one two three lorastudio sks ohwx trigger"
)
# Qwen-Image's encoder prompt template (the pipeline drops its first 34 tokens) and Qwen3's chat
# turn (Z-Image), with the special markers that become added tokens.
QWEN_IMAGE_TEMPLATE = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, "
    "text, spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}"
    "<|im_end|>\n<|im_start|>assistant\n"
)
# Special tokens in the order of the real Qwen2.5/Qwen3 vocabulary (151643, 151644, ...).
QWEN_SPECIALS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)
# What ZImagePipeline calls: apply_chat_template(..., add_generation_prompt=True, enable_thinking=True),
# rendered like the real Qwen3 template for a single user turn.
QWEN3_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)
CLIP_MAX_LENGTH = 77
T5_MAX_LENGTH = 512
QWEN_MAX_LENGTH = 32768


def training_text() -> list[str]:
    """The fixed text every tiny tokenizer is laid out from (same list in every process)."""
    lines = [f"a {c} {s} on a {b} background" for c in COLOURS for s in SHAPES for b in COLOURS if b != c]
    words = _WORDS_TEXT.split()
    lines += [" ".join(words), " ".join(words).upper(), " ".join(w.capitalize() for w in words)]
    lines += [QWEN_IMAGE_TEMPLATE.format(line) for line in ("a red circle on a blue background",)]
    lines += ["0 1 2 3 4 5 6 7 8 9 , . ; : ! ? ' \" ( ) [ ] - _ / + = * & % $ # @"]
    return lines


def learn_bpe_merges(words: Counter[tuple[str, ...]], max_merges: int) -> list[tuple[str, str]]:
    """Byte-pair merges learned from `words` (symbol tuple -> count), deterministically.

    Each round merges the most frequent adjacent pair; ties go to the smallest pair in string
    order. Stops when no word has two symbols left or after `max_merges` merges.
    """
    live = {symbols: count for symbols, count in words.items() if len(symbols) > 1}
    merges: list[tuple[str, str]] = []
    while live and len(merges) < max_merges:
        pairs: Counter[tuple[str, str]] = Counter()
        for symbols, count in live.items():
            for pair in zip(symbols, symbols[1:], strict=False):
                pairs[pair] += count
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        merged: dict[tuple[str, ...], int] = {}
        for symbols, count in live.items():
            if best[0] in symbols:
                symbols = _apply_merge(symbols, best)
            if len(symbols) > 1:  # a word that is one symbol has no pairs left
                merged[symbols] = merged.get(symbols, 0) + count
        live = merged
    return merges


def _apply_merge(symbols: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    out: list[str] = []
    i = 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


def _byte_alphabet() -> list[str]:
    """The 256 byte-level symbols in byte order (the real CLIP / GPT-2 layout)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return list(bytes_to_unicode().values())


def _vocab_from_merges(base: list[str], merges: list[tuple[str, str]]) -> dict[str, int]:
    tokens = list(base)
    seen = set(tokens)
    for a, b in merges:
        if a + b not in seen:
            seen.add(a + b)
            tokens.append(a + b)
    return {tok: i for i, tok in enumerate(tokens)}


@lru_cache(maxsize=1)
def _clip_vocab_merges() -> tuple[dict[str, int], tuple[tuple[str, str], ...]]:
    from transformers import CLIPTokenizer

    alphabet = _byte_alphabet()
    # A merge-less tokenizer of the real class gives the real normaliser and pre-tokeniser.
    probe = CLIPTokenizer(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]).backend_tokenizer
    words: Counter[tuple[str, ...]] = Counter()
    for line in training_text():
        text = probe.normalizer.normalize_str(line)
        for piece, _ in probe.pre_tokenizer.pre_tokenize_str(text):
            words[(*piece[:-1], piece[-1] + "</w>")] += 1
    merges = learn_bpe_merges(words, max_merges=4000)
    vocab = _vocab_from_merges(alphabet + [c + "</w>" for c in alphabet], merges)
    for special in ("<|startoftext|>", "<|endoftext|>"):
        vocab[special] = len(vocab)
    return vocab, tuple(merges)


def clip_tokenizer(pad_token: str = "<|endoftext|>") -> CLIPTokenizer:
    """A tiny CLIPTokenizer (max length 77). SDXL's second tokenizer pads with "!"."""
    from transformers import CLIPTokenizer

    vocab, merges = _clip_vocab_merges()
    return CLIPTokenizer(
        vocab=dict(vocab), merges=list(merges), pad_token=pad_token, model_max_length=CLIP_MAX_LENGTH
    )


@lru_cache(maxsize=1)
def _t5_pieces() -> tuple[tuple[str, float], ...]:
    """Unigram pieces in the T5 layout: <pad>=0, </s>=1, <unk>=2, then word and character pieces."""
    counts = Counter(w for line in training_text() for w in line.split() if "<|" not in w)
    total = sum(counts.values())
    pieces: list[tuple[str, float]] = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    for word, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        pieces.append(("\u2581" + word, math.log(count / total)))
    chars = [chr(i) for i in range(33, 127)]
    pieces += [("\u2581", -15.0)] + [("\u2581" + c, -19.0) for c in chars] + [(c, -20.0) for c in chars]
    unique: dict[str, float] = {}
    for piece, score in pieces:
        unique.setdefault(piece, score)
    return tuple(unique.items())


def t5_tokenizer() -> T5Tokenizer:
    """A tiny T5Tokenizer (Unigram; 100 <extra_id_*> tokens appended like the real one)."""
    from transformers import T5Tokenizer

    return T5Tokenizer(vocab=list(_t5_pieces()), model_max_length=T5_MAX_LENGTH)


@lru_cache(maxsize=1)
def _qwen_vocab_merges() -> tuple[dict[str, int], tuple[tuple[str, str], ...]]:
    import re

    from transformers import Qwen2Tokenizer

    alphabet = _byte_alphabet()
    probe = Qwen2Tokenizer(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]).backend_tokenizer
    split_specials = re.compile("|".join(re.escape(s) for s in QWEN_SPECIALS))
    words: Counter[tuple[str, ...]] = Counter()
    for line in training_text():
        for chunk in split_specials.split(line):  # specials are added tokens: never part of a word
            text = probe.normalizer.normalize_str(chunk)
            for piece, _ in probe.pre_tokenizer.pre_tokenize_str(text):
                words[tuple(piece)] += 1
    merges = learn_bpe_merges(words, max_merges=4000)
    return _vocab_from_merges(alphabet, merges), tuple(merges)


def qwen_tokenizer() -> Qwen2Tokenizer:
    """A tiny Qwen2Tokenizer with the Qwen special tokens (in their real order) and a chat template."""
    from tokenizers import AddedToken
    from transformers import Qwen2Tokenizer

    vocab, merges = _qwen_vocab_merges()
    tok = Qwen2Tokenizer(
        vocab=dict(vocab),
        merges=list(merges),
        model_max_length=QWEN_MAX_LENGTH,
        errors="replace",
        chat_template=QWEN3_CHAT_TEMPLATE,
    )
    for token in QWEN_SPECIALS:  # one at a time so the ids follow the listed order
        special = token.startswith("<|")
        tok.add_tokens([AddedToken(token, special=special, normalized=False)], special_tokens=special)
    return tok
