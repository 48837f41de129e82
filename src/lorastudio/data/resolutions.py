"""Several training resolutions in one run (issue 29 part 5; no torch, no HTTP): every image of
an entry is used at each of its resolutions, bucketed with the buckets of that resolution (the
same rules as data.scan: aspect buckets or the square, no_upscale's fitting bucket).

The scan checks and hashes each image once (at the first resolution); the items at the other
resolutions are copies with their own bucket and `resolution`, so the latent cache, the sampler
and the mix treat them as items of their own (an entry of n images at k resolutions has k x n
items, each repeated as the entry says).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from lorastudio.data.buckets import choose_bucket, make_buckets, resolution_problems
from lorastudio.data.items import ImageItem
from lorastudio.errors import DatasetError


def at_resolution(
    items: Sequence[ImageItem], resolution: int, multiple: int, *, aspect_buckets: bool, no_upscale: bool
) -> list[ImageItem]:
    """`items` re-bucketed for `resolution` (their `resolution` set to it).
    Raises DatasetError when the family cannot train that resolution."""
    problems = resolution_problems(resolution, multiple)
    if problems:
        raise DatasetError(f"resolution {resolution} is not supported", problems)
    buckets = make_buckets(resolution, multiple) if aspect_buckets else [(resolution, resolution)]
    return [
        replace(
            it,
            resolution=resolution,
            bucket=choose_bucket(
                it.width, it.height, buckets, multiple, no_upscale=no_upscale, square=not aspect_buckets
            ),
        )
        for it in items
    ]


def buckets_by_resolution(items: Sequence[ImageItem]) -> dict[str, dict[str, int]]:
    """Images per bucket at each resolution: "1024" -> {"WxH": count}, resolutions ascending,
    buckets ordered by (width, height)."""
    out: dict[str, dict[str, int]] = {}
    for resolution in sorted({it.resolution for it in items}):
        counts = Counter(it.bucket for it in items if it.resolution == resolution)
        out[str(resolution)] = {f"{w}x{h}": counts[(w, h)] for (w, h) in sorted(counts)}
    return out
