"""Captions longer than the text encoder reads: named, not silently cut.

A family's text encoder reads a fixed number of tokens (SDXL's CLIPs 77, FLUX.1's and Chroma's
T5 the run's max_sequence_length); its pipeline's encode_prompt cuts the rest without a word
(diffusers logs it at most), so a long tag list trains as its first part only. Phase 1 measures
each caption with the pipeline's own tokenizer (FamilySpec.caption_tokens says which and its
limit) and the run's plan notes (PlanChosen.fallbacks: the web form's plan summary, the CLI's
log) say how many are cut and show the longest. A family whose pipeline wraps the caption in a
template of its own (Qwen-Image, Z-Image, FLUX.2, Krea 2) is not measured (caption_tokens None).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.families.spec import FamilySpec

SHOWN = 3  # captions quoted in the note, longest first
QUOTED_CHARS = 60  # characters of each quoted caption


def token_limit(spec: FamilySpec, cfg: TrainConfig) -> int | None:
    """The most tokens (special ones included) the family's text encoder reads of a caption in
    this run; None when the family is not measured."""
    if spec.caption_tokens is None:
        return None
    limit = spec.caption_tokens[1]
    return limit if limit is not None else cfg.max_sequence_length


def cut_captions_note(
    spec: FamilySpec, cfg: TrainConfig, encoders: Any, texts: Sequence[object]
) -> str | None:
    """The plan note naming the captions among `texts` (strings; others are skipped) that are
    longer than the text encoder reads (`token_limit`), measured with the text pipeline
    `encoders`' tokenizer; None when none is, or the family is not measured."""
    limit = token_limit(spec, cfg)
    tokenizer = getattr(encoders, spec.caption_tokens[0], None) if spec.caption_tokens else None
    if limit is None or tokenizer is None:
        return None
    captions = sorted({t for t in texts if isinstance(t, str)})
    if not captions:
        return None
    lengths = [len(ids) for ids in tokenizer(captions, truncation=False)["input_ids"]]
    cut = sorted(((n, c) for n, c in zip(lengths, captions, strict=True) if n > limit), key=lambda nc: -nc[0])
    if not cut:
        return None
    shown = "; ".join(
        f'"{c[:QUOTED_CHARS]}{"..." if len(c) > QUOTED_CHARS else ""}" ({n} tokens)' for n, c in cut[:SHOWN]
    )
    more = f" and {len(cut) - SHOWN} more" if len(cut) > SHOWN else ""
    return (
        f"captions: {len(cut)} of {len(captions)} are longer than the {limit} tokens {spec.title}'s text "
        f"encoder reads, and train cut there: {shown}{more}; shorten them"
        + (" or raise max_sequence_length" if _may_raise(spec, limit) else "")
    )


def _may_raise(spec: FamilySpec, limit: int) -> bool:
    """Whether the limit is the run's max_sequence_length and the family allows a larger one."""
    cap = spec.max_sequence_length_max
    return spec.caption_tokens is not None and spec.caption_tokens[1] is None and (cap is None or limit < cap)
