"""Aspect-ratio buckets: (width, height) training sizes of about the same area.

Every bucket side is a multiple of the family's `multiple`, every area is at most
resolution**2 (and close to it), aspect ratios span 1:max_ratio to max_ratio:1, and the square
(resolution, resolution) bucket is always present. The set is symmetric: (w, h) is a bucket
exactly when (h, w) is.
"""

from __future__ import annotations

import math

from lorastudio.errors import ConfigError, FieldProblem

MAX_RATIO = 4.0  # the buckets' aspect ratios span 1:MAX_RATIO to MAX_RATIO:1


def resolution_problems(resolution: int, multiple: int) -> list[str]:
    """Why `resolution` cannot be trained with a family needing `multiple` (empty if it can)."""
    if multiple < 1:
        return [f"resolution multiple must be >= 1 (got {multiple})"]
    problems = []
    if resolution % multiple:
        problems.append(f"resolution {resolution} is not a multiple of {multiple}")
    if resolution < 2 * multiple:
        problems.append(f"resolution {resolution} is smaller than {2 * multiple} (2 x {multiple})")
    return problems


def make_buckets(resolution: int, multiple: int, max_ratio: float = MAX_RATIO) -> list[tuple[int, int]]:
    """All buckets for a training resolution, sorted by aspect ratio (tallest first).

    For each width w (a multiple of `multiple`), the height is the largest multiple with
    w * h <= resolution**2; of widths sharing a height only the widest is kept, so each bucket
    has the largest area its shape allows.
    Raises: ConfigError if the resolution is not a multiple of `multiple` or below 2 x multiple,
    or if max_ratio < 1.
    """
    problems = resolution_problems(resolution, multiple)
    if not (max_ratio >= 1.0 and math.isfinite(max_ratio)):
        problems.append(f"max_ratio must be a finite number >= 1 (got {max_ratio})")
    if problems:
        raise ConfigError([FieldProblem("resolution", p) for p in problems])
    area = resolution * resolution
    # Only widths near the ratio range can make a bucket; past the top, finish the last height's
    # run of widths so its widest member is known.
    first = max(1, math.floor((math.sqrt(area / max_ratio) - multiple) / multiple)) * multiple
    top = math.sqrt(area * max_ratio)
    widest_for_height: dict[int, int] = {}
    width, previous = first, None
    while width * multiple <= area:
        height = (area // (width * multiple)) * multiple
        if width > top and height != previous:
            break
        widest_for_height[height] = width  # widths grow, so the last one is the widest
        width, previous = width + multiple, height
    # Filter by ratio only after keeping the widest per height: this keeps the set symmetric.
    buckets = {(w, h) for h, w in widest_for_height.items() if max(w / h, h / w) <= max_ratio}
    buckets.add((resolution, resolution))
    return sorted(buckets, key=lambda b: (b[0] / b[1], b))


def nearest_bucket(width: int, height: int, buckets: list[tuple[int, int]]) -> tuple[int, int]:
    """The bucket whose aspect ratio is closest to width/height in log space.

    Ties go to the larger bucket area, then the smaller (width, height), so the choice is
    deterministic. Raises ConfigError if `buckets` is empty or a size is not positive.
    """
    if not buckets:
        raise ConfigError([FieldProblem("buckets", "no buckets to choose from")])
    if width < 1 or height < 1:
        raise ConfigError([FieldProblem("size", f"image size must be positive (got {width}x{height})")])
    target = math.log(width / height)
    return min(buckets, key=lambda b: (abs(math.log(b[0] / b[1]) - target), -b[0] * b[1], b))


def upscale_factor(width: int, height: int, bucket: tuple[int, int]) -> float:
    """How much an image of `width` x `height` is enlarged to cover `bucket` (data.crop scales
    by max(bucket_w / width, bucket_h / height)); above 1 it is upscaled."""
    return max(bucket[0] / width, bucket[1] / height)


def fitting_bucket(
    width: int,
    height: int,
    cap: tuple[int, int],
    multiple: int,
    max_ratio: float = MAX_RATIO,
    square: bool = False,
) -> tuple[int, int]:
    """The largest bucket inside the image itself: each side a multiple of `multiple`, at most
    the image's side and the side of `cap` (the bucket it replaces, so the area never grows),
    at least `multiple` (an image smaller than that is still enlarged to it); the long side is
    shortened to keep the ratio within `max_ratio`; `square` gives a square bucket."""
    w = max(multiple, min(width, cap[0]) // multiple * multiple)
    h = max(multiple, min(height, cap[1]) // multiple * multiple)
    if square:
        w = h = min(w, h)
    if w > h * max_ratio:
        w = max(multiple, int(h * max_ratio) // multiple * multiple)
    elif h > w * max_ratio:
        h = max(multiple, int(w * max_ratio) // multiple * multiple)
    return w, h


def choose_bucket(
    width: int,
    height: int,
    buckets: list[tuple[int, int]],
    multiple: int,
    *,
    no_upscale: bool = False,
    square: bool = False,
) -> tuple[int, int]:
    """The bucket an image trains at: `nearest_bucket`, or, with `no_upscale` when that one
    would enlarge the image, the `fitting_bucket` of the image's own size (no enlargement)."""
    bucket = nearest_bucket(width, height, buckets)
    if no_upscale and upscale_factor(width, height, bucket) > 1.0:
        return fitting_bucket(width, height, bucket, multiple, square=square)
    return bucket
