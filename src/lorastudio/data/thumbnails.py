"""Thumbnails of dataset images: decoded at reduced size, within the decode budget, cached.

- A JPEG is decoded at 1/2, 1/4 or 1/8 scale (Pillow's draft mode, the largest reduction that
  still covers the thumbnail). PNG and WebP have no reduced decode: they are decoded whole only
  when width*height (x4 for WebP: `images.decode_cost`) is within the server's decode budget
  (settings.max_decode_pixels), then
  box-reduced (`Image.reduce`) before the Lanczos resize, so no full-size copy is made. A
  larger PNG/WebP gets a placeholder (`TooLargeToPreview`); the training worker still decodes
  it under its own limit (settings.max_image_pixels).
- Every decode runs on one of the process's two decode threads (`data.decode_slots`).
- Results are cached as JPEG files under <home>/cache/thumbs, keyed by the image's path, inode,
  size and mtime and the thumbnail size (an edited or replaced image gets a new key), written
  stage-then-rename. The cache keeps at most CACHE_MAX_FILES files, the oldest written pruned
  first: those this process wrote in the order it wrote them (a sequence, not the wall clock,
  which a time sync may set back), older ones (an earlier process's) before them by mtime.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
from functools import lru_cache
from pathlib import Path

from PIL import Image, ImageDraw

from lorastudio.data.colour import ProfileError
from lorastudio.data.decode_slots import run_decode
from lorastudio.data.images import (
    DECODE_ERRORS,
    PIXEL_RULES,
    WEBP_DECODE_COST,
    bad_image,
    decode_cost,
    eight_bit,
    has_transparency,
    mask_grey,
    open_image,
    oversized,
    to_rgb,
)
from lorastudio.data.orientation import ORIENTATION_FIX, exif_orientation
from lorastudio.errors import LorastudioError, os_error_text
from lorastudio.file_version import version_of
from lorastudio.staged_files import staging_path

log = logging.getLogger(__name__)
CACHE_MAX_FILES = 20_000
PRUNE_EVERY = 200  # writes between two checks of the cache's size
THUMB_WAIT_S = 20.0  # longest wait of a thumbnail request for a decode slot
JPEG_QUALITY = 85
_BAND_BYTES = 8 * 2**20  # bytes of one band of rows reduced at once
_writes = 0
_written: dict[Path, int] = {}  # this process's cached files -> their write number (its own order)


class TooLargeToPreview(LorastudioError):
    """A PNG/WebP whose full decode exceeds the server's decode budget (no reduced decode)."""


def cache_key(path: Path, size: int, alpha: bool = False, mask: bool = False) -> str:
    """Hex key of `path`'s thumbnail of longest side `size` (changes when the file does;
    `alpha`: the thumbnail of its alpha channel; `mask`: of the loss mask it is)."""
    st = path.stat()
    ident = "\0".join(str(v) for v in (PIXEL_RULES, path, size, *version_of(st)))
    if alpha:
        ident += "\0alpha"
    if mask:
        ident += "\0mask"
    return hashlib.sha256(ident.encode("utf-8", "surrogateescape")).hexdigest()


def _reduced(img: Image.Image, size: int) -> Image.Image:
    """The decoded `img` box-reduced so that its longest side stays >= 2*size, in a mode
    `Image.reduce` supports (palette and 1-bit images are converted first). RGBA/LA images are
    reduced in bands of rows: Pillow reduces them through a premultiplied full-size copy."""
    if has_transparency(img):
        img = eight_bit(img)  # a palette's or colour key's transparency as an alpha channel (LA / RGBA)
    if img.mode == "P":
        img = img.convert("RGB")
    elif img.mode == "1":
        img = img.convert("L")
    elif img.mode.startswith("I;16"):
        img = img.convert("I")
    factor = max(img.size) // (2 * size)
    if factor <= 1:
        return img
    if img.mode not in ("RGBA", "LA"):
        return img.reduce(factor)
    width, height = img.size
    out = Image.new(img.mode, (-(-width // factor), -(-height // factor)))
    band = factor * max(1, _BAND_BYTES // (width * len(img.getbands()) * factor))  # rows per band
    for top in range(0, height, band):
        piece = img.crop((0, top, width, min(height, top + band)))  # [band, width] rows, a copy
        out.paste(piece.reduce(factor), (0, top // factor))
    return out


def render_thumbnail(
    path: Path, size: int, *, max_pixels: int, decode_pixels: int, alpha: bool = False, mask: bool = False
) -> bytes:
    """Decode `path` at reduced size and return a JPEG of longest side `size` (EXIF-upright);
    with `alpha`, of its alpha channel as grey (opaque = white: the loss mask alpha_mask reads);
    with `mask`, a masks/ file as the loss mask it trains with (images.mask_grey).

    Raises: TooLargeToPreview when the decode would exceed `decode_pixels`; DatasetError when
    the file is unusable (link, corrupt, over `max_pixels`).
    """
    with open_image(path) as img:
        width, height = img.size
        if width * height > max_pixels:
            raise oversized(path, width, height, max_pixels)
        orientation = exif_orientation(img)
        icc = img.info.get("icc_profile")  # the reduced copy has no info; converted from after it
        if img.format in ("JPEG", "MPO"):
            img.draft("RGB", (size, size))
        if decode_cost(img) > decode_pixels:
            raise TooLargeToPreview(
                f"{path.name}: {width}x{height} {img.format} is larger than the server decodes "
                f"for a preview ({decode_pixels:,} pixels, a WebP counting {WEBP_DECODE_COST}x; "
                "settings.max_decode_pixels)"
            )
        try:
            img.load()
            small = _reduced(img, size)
        except DECODE_ERRORS as err:
            raise bad_image(path, f"corrupt ({err})") from None
    try:
        if alpha:
            small = small.convert("RGBA").getchannel("A")
        else:
            small = mask_grey(small) if mask else to_rgb(small, icc)
    except ProfileError as err:
        raise bad_image(path, str(err)) from None
    small.thumbnail((size, size), Image.Resampling.LANCZOS)
    fix = ORIENTATION_FIX.get(orientation)
    if fix is not None:
        small = small.transpose(fix)
    buf = io.BytesIO()
    small.save(buf, format="JPEG", quality=JPEG_QUALITY)
    return buf.getvalue()


def thumbnail_jpeg(
    path: Path,
    size: int,
    *,
    cache_dir: Path,
    max_pixels: int,
    decode_pixels: int,
    wait_s: float | None = None,
    alpha: bool = False,
    mask: bool = False,
) -> bytes:
    """The JPEG thumbnail of `path` (longest side `size`), from the cache or rendered on a decode
    thread and cached. Concurrent requests for one image queue and then find it cached.
    `alpha`: the thumbnail of its alpha channel, `mask`: of a masks/ file's mask (render_thumbnail).

    Raises: DecodeBusy (no decode thread within `wait_s`, default THUMB_WAIT_S), TooLargeToPreview,
    DatasetError.
    """
    key = cache_key(path, size, alpha, mask)
    cached = cache_dir / key[:2] / f"{key}.jpg"

    def render() -> bytes:
        try:
            return cached.read_bytes()  # made while this request waited
        except FileNotFoundError:
            data = render_thumbnail(
                path, size, max_pixels=max_pixels, decode_pixels=decode_pixels, alpha=alpha, mask=mask
            )
        try:
            _store(cached, data)
        except OSError as err:  # a full or read-only cache: the thumbnail is served, not kept
            _uncached(cache_dir, err)
        return data

    try:
        return cached.read_bytes()
    except FileNotFoundError:
        return run_decode(render, THUMB_WAIT_S if wait_s is None else wait_s)


_told: set[tuple[str, int | None]] = set()  # (cache folder, errno) already logged by _uncached


def _uncached(cache_dir: Path, err: OSError) -> None:
    """A thumbnail the cache could not keep (a full disk, a read-only or unwritable cache folder):
    served anyway, rendered again next time; logged once per folder and reason."""
    told = (str(cache_dir), err.errno)
    if told not in _told:
        _told.add(told)
        log.warning(
            "thumbnails are not cached (%s: %s): each is decoded again when asked for; free space or"
            " make that folder writable",
            cache_dir,
            err.strerror or os_error_text(err),
        )


def _store(target: Path, data: bytes) -> None:
    """Write `data` to `target` through a hidden staging file and a rename; prune sometimes."""
    global _writes
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = staging_path(target)  # staged_files.py: a killed writer's is removed at a server start
    try:
        tmp.write_bytes(data)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    _writes += 1
    _written.pop(target, None)  # rewritten: the newest again
    _written[target] = _writes
    if _writes % PRUNE_EVERY == 0:
        prune_cache(target.parent.parent)


def prune_cache(cache_dir: Path, keep: int = CACHE_MAX_FILES) -> int:
    """Delete the oldest cached thumbnails beyond `keep` files. Returns how many were deleted.

    Oldest: the files this process did not write (an earlier process's: older than all of its
    own) by mtime, then its own in the order it wrote them; never the wall clock alone, so a
    clock set back does not make the thumbnails written after it the first to go."""
    files = [p for p in cache_dir.glob("*/*.jpg") if p.is_file()]
    if len(files) <= keep:
        return 0
    for gone in _written.keys() - set(files):  # removed otherwise (a cache cleared): forgotten
        del _written[gone]
    files.sort(key=_age)
    for old in files[: len(files) - keep]:
        old.unlink(missing_ok=True)
        _written.pop(old, None)
    return len(files) - keep


def _age(path: Path) -> tuple[int, int]:
    """A cached file's place in the pruning order: (this process's write number, or 0 for a file
    of an earlier process, then its mtime_ns for those; 0 for a file gone since the scan)."""
    number = _written.get(path)
    if number is not None:
        return number, 0
    try:
        return 0, path.stat().st_mtime_ns
    except FileNotFoundError:
        return 0, 0


@lru_cache(maxsize=8)
def placeholder_jpeg(size: int) -> bytes:
    """A grey JPEG square of side `size` saying "too large to preview"."""
    img = Image.new("RGB", (size, size), (225, 225, 225))
    draw = ImageDraw.Draw(img)
    draw.rectangle((0, 0, size - 1, size - 1), outline=(160, 160, 160))
    draw.text((size // 2, size // 2), "too large\nto preview", fill=(90, 90, 90), anchor="mm", align="center")
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=JPEG_QUALITY)
    return buf.getvalue()
