"""Loss masks that leave nothing to learn (no torch): black everywhere (or an alpha_mask image
transparent everywhere) while `unmasked_weight` is 0, so every pixel of the image gets loss
weight 0 (training/step.mask_weights) and its samples teach nothing while taking their share of
each step. The preflight names them (RELIABILITY 1732), as it names images without a mask.

A mask is judged where the run reads it (RELIABILITY 1871): without random_crop, inside the
centred crop its bucket takes (the loader's rule: data/crop.py's resized_size and crop_offset,
the window mapped back onto the mask's own pixels, rounded outward: `_centre_window`), so a 1:8
image whose mask is white only at the ends its bucket cuts off is named; with random_crop, the
whole mask (every crop the loader may draw, together, covers the whole resized image: it is named
only when no crop can train a pixel; one whose white part only some crops reach is not named).
Each image is judged at each bucket it trains at (one per resolution), and named once when a
bucket's crop is black.

Each mask is decoded (data.masks.load_mask) for the brightest value of that region, remembered
in this process by the mask file's sha256, the bucket and the crop rule (a server's preflights of
one dataset decode each mask once: a 1 MP mask of noise takes ~15 ms here); a dataset of more
masked images than MAX_CHECKED has the first MAX_CHECKED checked and says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from lorastudio.data.crop import crop_offset, resized_size
from lorastudio.data.items import ImageItem, item_name
from lorastudio.data.masks import load_mask
from lorastudio.errors import DatasetError

MAX_CHECKED = 1_000  # masks checked per preflight
_BRIGHTEST: dict[str, int] = {}  # mask sha256, bucket, crop rule -> the region's brightest value (0-255)
_REMEMBERED = 100_000  # the most kept (a few MB)
NAMED = 10  # blank masks named in the warning; the rest are counted


def blank_masks(
    items: Sequence[ImageItem], labels: Sequence[str] = (), *, random_crop: bool = False
) -> tuple[list[str], int]:
    """(the sorted names, data.items.item_name, of the images whose mask is 0 everywhere in the
    region the run reads at one of their buckets (module docstring: the centred crop, or the
    whole mask with `random_crop`); how many masked images were left unchecked past
    MAX_CHECKED). Each image once. A mask that cannot be decoded now is left to the run's own
    decode, which names it."""
    seen: dict[tuple[int, str], list[ImageItem]] = {}  # an image at several resolutions: each bucket
    for item in items:
        if item.mask is not None:
            at = seen.setdefault((item.entry, str(item.path)), [])
            if all(other.bucket != item.bucket for other in at):
                at.append(item)
    masked = list(seen.values())
    blank = []
    for copies in masked[:MAX_CHECKED]:
        if any(_brightest(item, random_crop) == 0 for item in copies):
            blank.append(item_name(copies[0], labels))
    return sorted(blank), max(0, len(masked) - MAX_CHECKED)


_NO_DRAW = np.random.default_rng(0)  # crop_offset's rng: a centred crop draws nothing


def _brightest(item: ImageItem, random_crop: bool) -> int | None:
    """The brightest value of the item's mask in the region the run reads (module docstring;
    None: it cannot be decoded now)."""
    ref = item.mask
    if ref is None:
        return None
    file_key = ref.sha256 or (
        f"alpha:{item.sha256}" if ref.alpha and item.sha256 else ""
    )  # an alpha_mask's image
    region = "whole" if random_crop else f"centre:{item.bucket[0]}x{item.bucket[1]}"
    key = f"{file_key}:{region}" if file_key else ""
    if key and key in _BRIGHTEST:
        return _BRIGHTEST[key]
    try:
        grey = load_mask(item)  # upright, the image's size
    except DatasetError:
        return None
    if not random_crop:
        grey = grey.crop(_centre_window(grey.size, item.bucket))  # the mask's pixels the crop shows
    brightest = int(grey.getextrema()[1])
    if key:
        if len(_BRIGHTEST) >= _REMEMBERED:
            _BRIGHTEST.clear()
        _BRIGHTEST[key] = brightest
    return brightest


def _centre_window(size: tuple[int, int], bucket: tuple[int, int]) -> tuple[int, int, int, int]:
    """The box (left, top, right, bottom) of a mask of `size` (width, height) that the loader's
    centred crop for `bucket` shows: crop_offset on the size it resizes to (resized_size), mapped
    back by the resize's scale and rounded outward (a mask pixel partly in the crop counts). No
    resize is made: a 24 MP mask's resize took ~0.4 s here, its box's extrema microseconds."""
    (w, h), (bw, bh) = size, bucket
    rw, rh = resized_size(w, h, bucket)
    top, left = crop_offset((rw, rh), bucket, random_crop=False, rng=_NO_DRAW)
    sx, sy = w / rw, h / rh  # mask pixels per resized pixel
    return (
        math.floor(left * sx),
        math.floor(top * sy),
        min(w, math.ceil((left + bw) * sx)),
        min(h, math.ceil((top + bh) * sy)),
    )


def blank_mask_warning(
    items: Sequence[ImageItem],
    unmasked_weight: float,
    labels: Sequence[str] = (),
    *,
    random_crop: bool = False,
) -> str | None:
    """The preflight's warning naming the images whose mask leaves no pixel trained in the region
    the run reads (module docstring; None when there are none, or when `unmasked_weight` > 0:
    their pixels then all train at that weight)."""
    if unmasked_weight > 0 or not any(it.mask is not None for it in items):
        return None
    blank, unchecked = blank_masks(items, labels, random_crop=random_crop)
    if not blank:
        return None
    named = ", ".join(blank[:NAMED]) + (f" and {len(blank) - NAMED} more" if len(blank) > NAMED else "")
    more = f" ({unchecked} masked image(s) past the first {MAX_CHECKED} not checked)" if unchecked else ""
    where = "" if random_crop else " in the centred crop their bucket takes"
    return (
        f"{len(blank)} image(s) have a mask that is black (or transparent) everywhere{where}: {named}{more}; with "
        "unmasked_weight 0 no pixel of them is trained (they teach nothing but take their place in each step): "
        "fix the mask, delete it to train the image unmasked, or raise unmasked_weight"
    )
