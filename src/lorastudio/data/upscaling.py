"""Which images a run would enlarge a lot, for the preflight's warning (no torch, no HTTP).

A small image trained at a large bucket is enlarged (Lanczos) to cover it: past about 2x the
model learns the blur of the enlargement. The preflight names those files so the user can
replace them or set `no_upscale` (data.buckets.choose_bucket).
"""

from __future__ import annotations

from collections.abc import Sequence

from lorastudio.data.buckets import upscale_factor
from lorastudio.data.items import ImageItem, item_name

UPSCALE_WARN_FACTOR = 2.0  # warn above this enlargement
NAMED_FILES = 10  # files named in the warning; the rest are counted


def upscaled_images(
    items: list[ImageItem], over: float = UPSCALE_WARN_FACTOR, labels: Sequence[str] = ()
) -> list[tuple[str, float]]:
    """(name, factor) of every image enlarged by more than `over` to cover its bucket (at its
    largest enlargement when it trains at several resolutions), largest factor first (ties by
    name); each image of each entry once, named by data.items.item_name with `labels`."""
    largest: dict[str, float] = {}  # an image at several resolutions: its largest enlargement
    for i in items:
        factor = upscale_factor(i.width, i.height, i.bucket)
        name = item_name(i, labels)
        largest[name] = max(factor, largest.get(name, 0.0))
    return sorted(((n, f) for n, f in largest.items() if f > over), key=lambda nf: (-nf[1], nf[0]))


def upscale_warning(items: list[ImageItem], no_upscale: bool, labels: Sequence[str] = ()) -> str | None:
    """The preflight line naming the images enlarged by more than 2x (the first NAMED_FILES
    and a count of the others; names as upscaled_images), or None when there are none."""
    found = upscaled_images(items, labels=labels)
    if not found:
        return None
    named = ", ".join(f"{name} ({factor:.1f}x)" for name, factor in found[:NAMED_FILES])
    more = f" and {len(found) - NAMED_FILES} more" if len(found) > NAMED_FILES else ""
    hint = (
        "they are smaller than the smallest bucket"
        if no_upscale
        else "set no_upscale = true to train them at their own size, or use larger images"
    )
    return (
        f"{len(found)} image(s) would be upscaled by more than {UPSCALE_WARN_FACTOR:g}x to fill their "
        f"bucket: {named}{more}; {hint}"
    )
