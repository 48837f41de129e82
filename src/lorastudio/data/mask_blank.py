"""Loss masks that leave nothing to learn (no torch): black everywhere (or an alpha_mask image
transparent everywhere) while `unmasked_weight` is 0, so every pixel of the image gets loss
weight 0 (training/step.mask_weights) and its samples teach nothing while taking their share of
each step. The preflight names them (RELIABILITY 1732), as it names images without a mask.

Each mask is decoded (data.masks.load_mask) for its brightest value; a dataset of more masked
images than MAX_CHECKED has the first MAX_CHECKED checked and says so (the check runs at every
preflight, and a mask's decode is not recorded with its content).
"""

from __future__ import annotations

from collections.abc import Sequence

from lorastudio.data.items import ImageItem, item_name
from lorastudio.data.masks import load_mask
from lorastudio.errors import DatasetError

MAX_CHECKED = 2_000  # masks decoded per preflight (a grey 1 MP PNG: a few ms each)
NAMED = 10  # blank masks named in the warning; the rest are counted


def blank_masks(items: Sequence[ImageItem], labels: Sequence[str] = ()) -> tuple[list[str], int]:
    """(the sorted names, data.items.item_name, of the images whose mask is 0 everywhere; how many
    masked images were left unchecked past MAX_CHECKED). Each image once (an image trained at
    several resolutions has one copy per side). A mask that cannot be decoded now is left to the
    run's own decode, which names it."""
    seen: dict[tuple[int, str], ImageItem] = {}
    for item in items:
        if item.mask is not None:
            seen.setdefault((item.entry, str(item.path)), item)
    masked = list(seen.values())
    blank = []
    for item in masked[:MAX_CHECKED]:
        try:
            brightest = load_mask(item).getextrema()[1]
        except DatasetError:
            continue
        if brightest == 0:
            blank.append(item_name(item, labels))
    return sorted(blank), max(0, len(masked) - MAX_CHECKED)


def blank_mask_warning(
    items: Sequence[ImageItem], unmasked_weight: float, labels: Sequence[str] = ()
) -> str | None:
    """The preflight's warning naming the images whose mask leaves no pixel trained (None when
    there are none, or when `unmasked_weight` > 0: their pixels then all train at that weight)."""
    if unmasked_weight > 0 or not any(it.mask is not None for it in items):
        return None
    blank, unchecked = blank_masks(items, labels)
    if not blank:
        return None
    named = ", ".join(blank[:NAMED]) + (f" and {len(blank) - NAMED} more" if len(blank) > NAMED else "")
    more = f" ({unchecked} masked image(s) past the first {MAX_CHECKED} not checked)" if unchecked else ""
    return (
        f"{len(blank)} image(s) have a mask that is black (or transparent) everywhere: {named}{more}; with "
        "unmasked_weight 0 no pixel of them is trained (they teach nothing but take their place in each step): "
        "fix the mask, delete it to train the image unmasked, or raise unmasked_weight"
    )
