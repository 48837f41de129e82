"""Captions longer than the text encoder reads: named, not silently cut.

A family's text encoder reads a fixed number of tokens (SDXL's CLIPs 77, FLUX.1's and Chroma's
T5 the run's max_sequence_length); its pipeline's encode_prompt cuts the rest without a word
(diffusers logs it at most), so a long tag list trains as its first part only. Phase 1 measures
each caption with the pipeline's own tokenizer (FamilySpec.caption_tokens says which and its
limit) and one of the run's dataset warnings says how many are cut and shows the longest
(training/loop_inputs.py: logged once, the CLI's `warning:` line, a DatasetWarnings event whose
list the run record keeps: RELIABILITY 863; it was a plan fallback, in none of them). A family whose pipeline wraps the caption in a
template of its own (Qwen-Image, Z-Image, FLUX.2 / klein, Krea 2) is measured with that template
built as its pipeline builds it (CaptionTokens.template): the template's tokens count against the
limit, as they do in the pipeline; Qwen-Image-Edit never cuts (CaptionTokens.cuts False).
A run whose captions come from the on-disk text cache makes the note from the counts kept with
the shards (`cut_note`, training/inputs/conditioning_disk.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.families.spec import CaptionTemplate, FamilySpec

SHOWN = 3  # captions quoted in the note, longest first
QUOTED_CHARS = 60  # characters of each quoted caption
QWEN_IMAGE_TOKENIZER_MAX = 1024  # QwenImagePipeline.tokenizer_max_length: its own cut
UNMEASURED = (
    "not measured: their cached text embeddings were written before lorastudio kept each caption's token "
    "count, so whether the text encoder cuts them is not known here (the API's preflight counts them where "
    "the base's tokenizer is local; clearing the text cache re-encodes and measures them)"
)


def token_limit(spec: FamilySpec, cfg: TrainConfig) -> int | None:
    """The most tokens (special ones included) the family's text encoder reads of a caption in
    this run; None when the family is not measured."""
    if spec.caption_tokens is None or not spec.caption_tokens.cuts:
        return None
    limit = spec.caption_tokens.limit
    return limit if limit is not None else cfg.max_sequence_length


def _plain(tokenizer: Any, encoders: Any, captions: list[str]) -> list[int]:
    return [len(ids) for ids in tokenizer(captions, truncation=False)["input_ids"]]


def _qwen_image(tokenizer: Any, encoders: Any, captions: list[str]) -> list[int]:
    # QwenImagePipeline._get_qwen_prompt_embeds: template.format(caption), its first drop_idx
    # tokens dropped from what the transformer reads
    drop = encoders.prompt_template_encode_start_idx
    texts = [encoders.prompt_template_encode.format(c) for c in captions]
    return [len(ids) - drop for ids in tokenizer(texts, truncation=False)["input_ids"]]


def _chat(thinking: bool) -> Callable[[Any, Any, list[str]], list[int]]:
    def count(tokenizer: Any, encoders: Any, captions: list[str]) -> list[int]:
        # ZImagePipeline._encode_prompt (thinking on) / Flux2KleinPipeline._get_qwen3_prompt_embeds
        texts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": c}],
                tokenize=False,
                add_generation_prompt=True,
                enable_thinking=thinking,
            )
            for c in captions
        ]
        return [len(ids) for ids in tokenizer(texts, truncation=False)["input_ids"]]

    return count


def _flux2_system(tokenizer: Any, encoders: Any, captions: list[str]) -> list[int]:
    # Flux2Pipeline._get_mistral_3_small_prompt_embeds: format_input's system message + caption
    from diffusers.pipelines.flux2.pipeline_flux2 import format_input

    messages = format_input(prompts=captions, system_message=encoders.system_message)
    out = tokenizer.apply_chat_template(
        messages, add_generation_prompt=False, tokenize=True, return_dict=True
    )
    return [len(ids) for ids in out["input_ids"]]  # the batch unpadded: each its own length


def _krea2(tokenizer: Any, encoders: Any, captions: list[str]) -> list[int]:
    # Krea2Pipeline.get_text_hidden_states: prefix + caption cut at max_sequence_length + prefix -
    # suffix tokens, then the suffix; the prefix dropped
    drop, suffix = (
        encoders.prompt_template_encode_start_idx,
        encoders.prompt_template_encode_num_suffix_tokens,
    )
    texts = [encoders.prompt_template_encode_prefix + c for c in captions]
    return [len(ids) - drop + suffix for ids in tokenizer(texts, truncation=False)["input_ids"]]


COUNTERS: dict[CaptionTemplate, Callable[[Any, Any, list[str]], list[int]]] = {
    "plain": _plain,
    "qwen_image": _qwen_image,
    "chat_thinking": _chat(thinking=True),
    "chat": _chat(thinking=False),
    "flux2_system": _flux2_system,
    "krea2": _krea2,
}


def caption_token_counts(spec: FamilySpec, encoders: Any, captions: Sequence[str]) -> list[int]:
    """Each caption's tokens as the family's pipeline builds them for its text encoder, before
    it cuts at `token_limit`: special and template tokens included, a dropped template prefix
    not. The pipeline reads the first `token_limit` of them. Needs a measured family (raises
    ValueError otherwise) and the text pipeline `encoders` holding its tokenizer."""
    if spec.caption_tokens is None or not spec.caption_tokens.cuts:
        raise ValueError(f"{spec.title}'s captions are not measured")
    tokenizer = getattr(encoders, spec.caption_tokens.tokenizer)
    return COUNTERS[spec.caption_tokens.template](tokenizer, encoders, list(captions))


def caption_counts(spec: FamilySpec, encoders: Any, captions: Sequence[str]) -> dict[str, int] | None:
    """caption -> its tokens (`caption_token_counts`) for a measured family whose text pipeline
    `encoders` holds its tokenizer; None otherwise (nothing to measure with)."""
    measured = spec.caption_tokens
    if measured is None or not measured.cuts or getattr(encoders, measured.tokenizer, None) is None:
        return None
    unique = sorted(set(captions))
    return dict(zip(unique, caption_token_counts(spec, encoders, unique) if unique else [], strict=True))


def cut_captions_note(
    spec: FamilySpec, cfg: TrainConfig, encoders: Any, texts: Sequence[object]
) -> str | None:
    """The dataset warning naming the captions among `texts` (strings; others are skipped) that are
    longer than the text encoder reads (`token_limit`), measured with the text pipeline
    `encoders`' tokenizer; None when none is, or the family is not measured."""
    captions = [t for t in texts if isinstance(t, str)]
    counts = caption_counts(spec, encoders, captions)
    return cut_note(spec, cfg, captions, counts) if counts is not None else None


def cut_note(
    spec: FamilySpec, cfg: TrainConfig, captions: Sequence[str], counts: Mapping[str, int]
) -> str | None:
    """`cut_captions_note` from known token `counts` (caption -> tokens, as
    `caption_token_counts` gives them: a run's, or those kept with the cached embeddings:
    training/inputs/conditioning_disk.py). A caption of `captions` without a count is said not
    measured (a text cache shard written before the counts were kept). None when every caption
    is measured and none is cut, or the family is not measured."""
    limit = token_limit(spec, cfg)
    if limit is None:
        return None
    ceiling = spec.max_sequence_length_max
    if spec.caption_tokens is not None and spec.caption_tokens.template == "qwen_image":
        ceiling = QWEN_IMAGE_TOKENIZER_MAX  # the pipeline's tokenizer cut
        limit = min(limit, ceiling)
    unique = sorted(set(captions))
    if not unique:
        return None
    cut = sorted(((counts[c], c) for c in unique if c in counts and counts[c] > limit), key=lambda nc: -nc[0])
    unknown = sum(1 for c in unique if c not in counts)
    if unknown and not cut:
        return f"captions: {unknown} of {len(unique)} {UNMEASURED}"
    if not cut:
        return None
    shown = "; ".join(  # a caption's line breaks as \n: the note is one line (a log line, `warning:`)
        f'"{_one_line(c[:QUOTED_CHARS])}{"..." if len(c) > QUOTED_CHARS else ""}" ({n} tokens)'
        for n, c in cut[:SHOWN]
    )
    more = f" and {len(cut) - SHOWN} more" if len(cut) > SHOWN else ""
    return (
        f"captions: {len(cut)} of {len(unique)} are longer than the {limit} tokens {spec.title}'s text "
        f"encoder reads{_with_template(spec)}, and train cut there: {shown}{more}; shorten them"
        + (" or raise max_sequence_length" if _may_raise(spec, limit, ceiling) else "")
        + (f"; {unknown} other(s) {UNMEASURED}" if unknown else "")
    )


def _one_line(text: str) -> str:
    """`text` with its line breaks written as the two characters \\n (a caption of two lines)."""
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\\n")


def _with_template(spec: FamilySpec) -> str:
    """Says that the counts hold the pipeline's prompt template, where it has one."""
    plain = spec.caption_tokens is None or spec.caption_tokens.template == "plain"
    return "" if plain else " (its prompt template's tokens included)"


def _may_raise(spec: FamilySpec, limit: int, ceiling: int | None) -> bool:
    """Whether the limit is the run's max_sequence_length and a larger one would be read (up
    to `ceiling`: the family's max_sequence_length_max or its pipeline's own cut; None: none)."""
    by_setting = spec.caption_tokens is not None and spec.caption_tokens.limit is None
    return by_setting and (ceiling is None or limit < ceiling)
