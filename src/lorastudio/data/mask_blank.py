"""Loss masks that leave nothing to learn (no torch): black everywhere (or an alpha_mask image
transparent everywhere) while `unmasked_weight` is 0, so every pixel of the image gets loss
weight 0 (training/step.mask_weights) and its samples teach nothing while taking their share of
each step. The preflight names them (RELIABILITY 1732), as it names images without a mask.

Each mask is decoded (data.masks.load_mask) for its brightest value, remembered in this process
by the mask file's sha256 (a server's preflights of one dataset decode each mask once: a 1 MP
mask of noise takes ~15 ms here); a dataset of more masked images than MAX_CHECKED has the first
MAX_CHECKED checked and says so.
"""

from __future__ import annotations

from collections.abc import Sequence

from lorastudio.data.items import ImageItem, item_name
from lorastudio.data.masks import load_mask
from lorastudio.errors import DatasetError

MAX_CHECKED = 1_000  # masks checked per preflight
_BRIGHTEST: dict[str, int] = {}  # mask sha256 -> its brightest value (0-255)
_REMEMBERED = 100_000  # the most kept (a few MB)
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
        brightest = _brightest(item)
        if brightest is None:
            continue
        if brightest == 0:
            blank.append(item_name(item, labels))
    return sorted(blank), max(0, len(masked) - MAX_CHECKED)


def _brightest(item: ImageItem) -> int | None:
    """The brightest value of the item's mask (None: it cannot be decoded now)."""
    ref = item.mask
    if ref is None:
        return None
    key = ref.sha256 or (f"alpha:{item.sha256}" if ref.alpha and item.sha256 else "")  # an alpha_mask's image
    if key and key in _BRIGHTEST:
        return _BRIGHTEST[key]
    try:
        brightest = int(load_mask(item).getextrema()[1])
    except DatasetError:
        return None
    if key:
        if len(_BRIGHTEST) >= _REMEMBERED:
            _BRIGHTEST.clear()
        _BRIGHTEST[key] = brightest
    return brightest


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
