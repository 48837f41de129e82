"""The texts of differential output preservation (TrainConfig.preservation; what it is and
why: config_preservation.py): for each dataset item, its caption with its entry's trigger word
replaced by the class word, or a preservation prompt. Phase 1 encodes `encode_list` beside the
captions (training/loop_inputs.py) and the preflight's wall-time forecast counts them
(jobs/preflight.py); the training step reads them through `PreservationTexts.text`
(training/preservation.py). No torch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lorastudio.data.paths import nfc

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.data import DatasetScan


def replace_trigger(caption: str, trigger: str | None, class_word: str) -> str:
    """`caption` with every whole-word occurrence of `trigger` replaced by `class_word`
    (unchanged without a trigger or without one). Both are compared in NFC: a caption saved in NFD
    holds the trigger typed in NFC, and NFD's combining accent after a shorter trigger ("cafe" in
    "café") is no letter to the pattern (RELIABILITY 1030); a caption with an occurrence comes
    back in NFC."""
    if not trigger:
        return caption
    text, found = re.subn(rf"(?<!\w){re.escape(nfc(trigger))}(?!\w)", lambda _: class_word, nfc(caption))
    return text if found else caption


@dataclass(frozen=True)
class PreservationTexts:
    """The texts whose base-model output a run preserves: `text(caption, item)` for the caption
    the sampler picked for dataset item `item` (its entry's trigger word replaced by the class
    word, or the preservation prompt of the item)."""

    class_word: str
    weight: float
    prompts: tuple[str, ...] | None
    triggers: tuple[str | None, ...]  # per dataset item: its entry's trigger word

    def text(self, caption: str, item: int) -> str:
        if self.prompts is not None:
            return self.prompts[item % len(self.prompts)]
        return replace_trigger(caption, self.triggers[item], self.class_word)

    def to_encode(self, captions: Sequence[Sequence[str]]) -> list[str]:
        """Every text a step may ask for, given each item's possible captions (unique, in order)."""
        texts = (self.text(c, i) for i, options in enumerate(captions) for c in options)
        return list(dict.fromkeys(texts))


def preservation_texts(cfg: TrainConfig, scan: DatasetScan) -> PreservationTexts | None:
    """The run's PreservationTexts (None without cfg.preservation); each item's trigger word is
    its dataset entry's (the run's for data_dir)."""
    keep = cfg.preservation
    if keep is None:
        return None
    from lorastudio.config_datasets import effective_trigger

    entries = scan.entries  # their trigger words are effective ones (data/entries.py)
    triggers = tuple(
        entries[it.entry].trigger_word if entries else effective_trigger(cfg.trigger_word)
        for it in scan.items
    )
    prompts = tuple(keep.prompts) if keep.prompts else None
    return PreservationTexts(keep.class_word, keep.weight, prompts, triggers)


def encode_list(
    texts: PreservationTexts | None, scan: DatasetScan, variants: Sequence[Sequence[str]]
) -> list[str]:
    """The texts phase 1 encodes for `texts` ([] without preservation): those of each item's
    caption, its variants (data/caption_variants.py) and a dropped caption ("")."""
    if texts is None:
        return []
    return texts.to_encode([[it.caption, "", *vs] for it, vs in zip(scan.items, variants, strict=True)])
