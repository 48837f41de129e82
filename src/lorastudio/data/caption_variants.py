"""Caption augmentation (issue 29 part 3): tag shuffle with `keep_tokens`, tag dropout, and the
variants a run encodes (no torch, no HTTP).

A caption's tags are its comma-separated parts (stripped; empty ones dropped). A variant keeps
the first `keep_tokens` tags in place, drops each other tag with probability `tag_dropout`
(never the trigger word, nor all of them: at least one stays) and, with `shuffle`, shuffles the
rest; the tags are joined with ", ".

Cached text embeddings are per caption, so a run with shuffle or tag dropout pre-draws
`variants` captions per image from a generator seeded by (seed, image index) and encodes each
distinct one once in phase 1: a per-variant cache (kohya's sd-scripts instead refuses to cache
text-encoder outputs with caption shuffle / dropout and encodes every step, the text encoders
kept loaded through training). The cost: up to `variants` x the texts
encoded and held in RAM; the text encoders are still freed before training. Each step then
takes one of the image's variants (training/inputs/conditioning.CaptionPicker). Everything is a pure
function of (seed, captions, settings), so a resume rebuilds the same variants.

Hand-written: kohya's and ai-toolkit's caption shufflers are methods of their dataset classes,
not a library.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from lorastudio.data.items import item_name
from lorastudio.data.paths import nfc

if TYPE_CHECKING:
    from lorastudio.data.items import DatasetScan

_CAPTION_STREAM = 2931  # keeps the variants' draws apart from every other stream of the seed
DEFAULT_VARIANTS = 8  # TrainConfig.caption_variants left unset


@dataclass(frozen=True)
class CaptionStyle:
    """How one image's caption is varied: `shuffle` the tags after the first `keep_tokens`,
    drop each of those with probability `tag_dropout`; `trigger` is never dropped (each of its
    tags, when it holds commas)."""

    shuffle: bool = False
    keep_tokens: int = 0
    tag_dropout: float = 0.0
    trigger: str | None = None

    @property
    def active(self) -> bool:
        """Whether the caption varies at all."""
        return self.shuffle or self.tag_dropout > 0


def split_tags(caption: str) -> list[str]:
    """The caption's comma-separated tags, stripped, empty ones left out."""
    return [t.strip() for t in caption.split(",") if t.strip()]


def caption_variant(caption: str, style: CaptionStyle, rng: np.random.Generator) -> str:
    """One variant of `caption` (see the module docstring). Draws from `rng` only when the
    style is active: one uniform per droppable tag, then one permutation when shuffling."""
    if not style.active:
        return caption
    tags = split_tags(caption)
    if not tags:  # only commas and blanks: no tag to vary, and joining none would train ""
        return caption
    fixed, rest = tags[: style.keep_tokens], tags[style.keep_tokens :]
    if style.tag_dropout > 0 and rest:
        trigger = _trigger_tags(style.trigger)
        keep = [nfc(t) in trigger or rng.random() >= style.tag_dropout for t in rest]
        if not fixed and not any(keep):  # never an empty caption by dropout alone
            keep[int(rng.integers(len(rest)))] = True
        rest = [t for t, k in zip(rest, keep, strict=True) if k]
    if style.shuffle and len(rest) > 1:
        rest = [rest[i] for i in rng.permutation(len(rest))]
    return ", ".join(fixed + rest)


def _trigger_tags(trigger: str | None) -> set[str]:
    """The trigger word's tags ("ohwx, man": two) in NFC, for a caption's tags compared in NFC: a
    caption saved in NFD holds the trigger typed in NFC (RELIABILITY 1030)."""
    return {nfc(t) for t in split_tags(trigger)} if trigger else set()


def can_vary(caption: str, style: CaptionStyle) -> bool:
    """Whether some draw of caption_variant gives `caption` another text: shuffling needs two tags
    after the first keep_tokens; dropout a tag there that is not the trigger word, and (without
    kept tags, as no draw empties a caption) a second tag to keep."""
    if not style.active:
        return False
    tags = split_tags(caption)
    fixed, rest = tags[: style.keep_tokens], tags[style.keep_tokens :]
    if style.shuffle and len(rest) > 1:
        return True
    trigger = _trigger_tags(style.trigger)
    droppable = any(nfc(t) not in trigger for t in rest)
    return style.tag_dropout > 0 and droppable and (bool(fixed) or len(rest) > 1)


def variation_warning(scan: DatasetScan, labels: Sequence[str] = ()) -> str | None:
    """The preflight line naming the images whose entry shuffles or drops tags but whose caption
    no draw can change (can_vary: a caption without commas has one tag), or None when there is
    none; each image once, named as data.items.item_name with `labels`."""
    if not scan.entries:
        return None
    active: dict[str, bool] = {}  # name -> some resolution's copy of it can vary
    for it in scan.items:
        e = scan.entries[it.entry]
        style = CaptionStyle(e.shuffle_tags, e.keep_tokens, e.tag_dropout, e.trigger_word)
        if style.active:
            name = item_name(it, labels)
            active[name] = active.get(name, False) or can_vary(it.caption, style)
    fixed = sorted(name for name, varies in active.items() if not varies)
    if not fixed:
        return None
    named = ", ".join(fixed[:10]) + (f" and {len(fixed) - 10} more" if len(fixed) > 10 else "")
    return (
        f"shuffle_tags / tag_dropout change no caption of {len(fixed)} of {len(active)} image(s): after "
        f"keep_tokens they have no two comma-separated tags to shuffle nor a tag to drop: {named}"
    )


def caption_variants(
    captions: Sequence[str], styles: Sequence[CaptionStyle], count: int, seed: int
) -> list[list[str]]:
    """The captions each image is trained with: [caption] for an image whose style is inactive,
    else `count` variants drawn with the generator of (seed, image index). Duplicates are kept
    (a variant drawn twice is drawn twice as often)."""
    out: list[list[str]] = []
    for index, (caption, style) in enumerate(zip(captions, styles, strict=True)):
        if not style.active:
            out.append([caption])
            continue
        rng = np.random.default_rng([seed, _CAPTION_STREAM, index])
        out.append([caption_variant(caption, style, rng) for _ in range(count)])
    return out


def variant_cost(captions: Sequence[str], variants: Sequence[Sequence[str]]) -> tuple[int, int]:
    """(distinct texts encoded with the variants, distinct captions without them)."""
    return len({v for vs in variants for v in vs}), len(set(captions))


def scan_variants(scan: DatasetScan, count: int | None, seed: int) -> list[list[str]]:
    """The caption variants of every item of a run's scan: each item's style is its dataset
    entry's (a scan without entries varies nothing); `count` None means DEFAULT_VARIANTS."""
    styles = [
        CaptionStyle(e.shuffle_tags, e.keep_tokens, e.tag_dropout, e.trigger_word)
        for e in (scan.entries[it.entry] for it in scan.items)
    ] if scan.entries else [CaptionStyle()] * len(scan.items)  # fmt: skip
    return caption_variants([it.caption for it in scan.items], styles, count or DEFAULT_VARIANTS, seed)


def captions_to_encode(captions: Sequence[str], caption_dropout: float | Sequence[float]) -> list[str]:
    """The unique captions, in first-seen order, plus "" when caption dropout is on (for any
    item, when given per item): the texts phase 1 encodes (training/inputs/conditioning.py) and the
    preflight counts on disk (jobs/preflight_cache.py)."""
    unique = list(dict.fromkeys(captions))
    dropping = max(caption_dropout, default=0.0) if isinstance(caption_dropout, Sequence) else caption_dropout
    if dropping > 0 and "" not in unique:
        unique.append("")
    return unique


def item_dropouts(scan: DatasetScan, run_dropout: float) -> list[float]:
    """Each item's caption dropout: its dataset entry's, or the run's for a scan without entries."""
    if not scan.entries:
        return [run_dropout] * len(scan.items)
    return [scan.entries[it.entry].caption_dropout for it in scan.items]


def caption_report(
    scan: DatasetScan,
    count: int | None,
    seed: int,
    *,
    with_controls: bool = False,
    in_step: bool = False,
) -> dict[str, object]:
    """The preflight's caption section: three example captions as the model sees them (the first
    variant of three images spread over the dataset), the variants per image and what they cost
    (texts encoded in phase 1 and cached, against the captions alone). `with_controls`: a family
    whose prompt sees the control images (each variant is encoded per control set);
    `in_step`: train_text_encoder (each step encodes its picks, nothing is cached)."""
    variants = scan_variants(scan, count, seed)
    n = len(variants)
    picks = sorted({0, n // 2, n - 1}) if n else []
    varied = any(len(vs) > 1 for vs in variants)
    if with_controls:  # conditioning keyed by (text, controls), as training/inputs/conditioning.py
        encoded = len({(v, it.controls) for it, vs in zip(scan.items, variants, strict=True) for v in vs})
        plain = len({(it.caption, it.controls) for it in scan.items})
    else:
        encoded, plain = variant_cost([it.caption for it in scan.items], variants)
    per_image = (count or DEFAULT_VARIANTS) if varied else 1
    cost = None
    if varied and in_step:
        cost = (
            f"tag shuffle / dropout: {per_image} caption variants per image; train_text_encoder encodes "
            "each step's pick through the text encoders' LoRA (nothing cached)"
        )
    elif varied:
        cost = (
            f"tag shuffle / dropout: {per_image} caption variants per image, {encoded} texts encoded once in "
            f"phase 1 and their embeddings cached ({encoded / max(plain, 1):.1f}x the {plain} captions); "
            "the text encoders are freed before training as usual"
        )
    return {
        "examples": [variants[i][0] for i in picks],
        "variants_per_image": per_image,
        "texts_encoded": encoded,
        "cost": cost,
    }
