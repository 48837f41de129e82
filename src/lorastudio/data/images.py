"""Open, check and decode dataset images with Pillow (no torch).

Only PNG, JPEG (and MPO, the multi-picture JPEG of phones) and WebP decoders are ever used, so
a file with an image extension cannot reach Pillow's riskier plugins. Files are opened without
following links (`data.safe_open`) and their headers checked before Pillow sees them
(`data.image_headers`: PNG chunks walked, JPEG metadata and WebP file sizes capped). Sizes are
checked from the header before any pixel is decoded, so oversized images and decompression
bombs are refused cheaply; so are animated images (APNG, animated WebP: `open_frames` counts
their frames), which training would read as their first frame, and images whose embedded ICC
profile cannot convert them to sRGB (data/colour.py; those that can are converted by `to_rgb`,
for training and thumbnails alike). Sizes reported here are after EXIF transpose.

Two budgets: `max_pixels` (settings.max_image_pixels) is the largest image a dataset may hold;
`decode_pixels` (settings.max_decode_pixels) is the most pixels the server decodes at once
(`decode_cost`: a WebP counts WEBP_DECODE_COST times its pixels, since Pillow holds the libwebp
canvas, the bytes it returns and the image: ~16 bytes per pixel against ~4 for PNG). A
check decode that would exceed it is skipped (the header, and for PNG every chunk's CRC, were
still checked; the training worker decodes the image and reports it if it is corrupt).

A file's first check (`probe_image(full=True)`: an upload, or a scan that has not seen it as it
is, data/decoded.py) decodes every pixel instead (`_full_decode`, within the same budget), and
inflates a PNG's pixel stream at any size (data/png_stream.py). A WebP above the budget (Pillow
has no reduced-scale WebP decode) is left undecided by such a check (`probe_full` says so: it is
not recorded as decoded) and decoded by the run's own scan, alone on the decode threads, before
any model loads (data/decode_checks.check_images).
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
from PIL import Image, ImageChops

from lorastudio.data.colour import ProfileError, profile_problem, to_srgb
from lorastudio.data.decode_slots import DEFAULT_DECODE_PIXELS, run_decode
from lorastudio.data.image_headers import DECODE_ERRORS, RangesFile, bad_image, check_header, header_size
from lorastudio.data.orientation import ORIENTATION_FIX, exif_orientation, upright_size
from lorastudio.data.png_stream import check_png_stream
from lorastudio.data.safe_open import FolderId, open_in_folder
from lorastudio.errors import DatasetError
from lorastudio.settings import MAX_IMAGE_PIXELS_ENV, PILLOW_MAX_PIXELS

# Pillow's JPEG opener also returns MPO (multi-picture JPEG) images.
ALLOWED_FORMATS = ("PNG", "JPEG", "WEBP")
WEBP_DECODE_COST = 4  # a WebP decode holds ~4x the memory of a PNG decode of the same size
# What a check of an image accepts (probe_image): part of the decoded record's key (data/decoded.py).
DECODE_RULES = "srgb-1"
# How an image's pixels are made (load_rgb, to_rgb): part of the latent cache's and the thumbnail
# cache's keys, so a change to it encodes and renders images again rather than read stale ones
# (2: a PNG colour key is transparency, RELIABILITY 553; 3: a 2/4-bit grey PNG's key scaled, 1038,
# and a crop far beyond its bucket cut from a window, 1036: data/pixel_rule.decode_rule).
PIXEL_RULES = "srgb-3"

_ALPHA_MODES = ("RGBA", "LA", "PA", "RGBa", "La")


@dataclass(frozen=True)
class ImageInfo:
    """Header facts of one image: size after EXIF transpose, and the EXIF orientation (1-8)."""

    width: int
    height: int
    orientation: int


_bad = bad_image
# A file object's repr in a decoder's message ("<_io.BufferedReader name='/…/.uploads/…'>").
_FILE_REPR = re.compile(r"\s*<[\w.]+ name=(?:'[^']*'|\"[^\"]*\"|\d+)>")


def _reason(err: BaseException, path: Path) -> str:
    """A decoder's message in the user's terms: no file object reprs or staging paths, the
    file's own name instead of its path."""
    text = _FILE_REPR.sub("", str(err)).replace(str(path), path.name).strip()
    return text or type(err).__name__


@contextmanager
def open_image(path: Path, folder_id: FolderId | None = None) -> Iterator[Image.Image]:
    """Open lazily (header only) with the allowed decoders, without following links; the
    header is checked first (`image_headers.check_header`) and a PNG is shown to Pillow without
    the chunks it does not need (an APNG: its default image). Raises DatasetError naming the
    file."""
    with open_frames(path, folder_id) as (img, _frames):
        yield img


def oversized(path: Path, width: int, height: int, max_pixels: int) -> DatasetError:
    """The refusal of an image over the `max_pixels` limit, naming its size, the limit and the
    setting that raises it."""
    return _bad(
        path,
        f"oversized ({width}x{height} = {width * height:,} pixels > limit {max_pixels:,}: "
        f"{MAX_IMAGE_PIXELS_ENV})",
    )


@contextmanager
def open_frames(
    path: Path, folder_id: FolderId | None = None, max_pixels: int = PILLOW_MAX_PIXELS
) -> Iterator[tuple[Image.Image, int]]:
    """`open_image`, with the number of frames the file holds: an APNG's from its acTL chunk
    (Pillow is not shown it), a WebP's from Pillow (an animated one's), 1 for a JPEG (an MPO's
    further pictures are a phone's preview or depth image, not frames). An image whose header
    says it is over `max_pixels` (at most Pillow's decompression-bomb limit, where its open
    refuses) is refused before Pillow sees it (`oversized`)."""
    with open_in_folder(path, folder_id) as real:
        png = check_header(real, path)
        real.seek(0)
        size = header_size(real)
        real.seek(0)
        if size is not None and size[0] * size[1] > min(max_pixels, PILLOW_MAX_PIXELS):
            raise oversized(path, size[0], size[1], min(max_pixels, PILLOW_MAX_PIXELS))
        source: io.IOBase | BinaryIO = real
        if png is not None and png.ranges != [(0, png.ranges[0][1])]:
            source = RangesFile(real, png.ranges)
        try:
            img = Image.open(source, formats=ALLOWED_FORMATS)
        except Image.DecompressionBombError as err:
            raise _bad(path, f"oversized (decompression bomb refused: {_reason(err, path)})") from None
        except DECODE_ERRORS as err:
            raise _bad(path, f"corrupt or not a PNG/JPEG/WebP image ({_reason(err, path)})") from None
        with img:
            if png is not None:
                png_colour_key(img, path)
                frames = png.frames
            elif img.format == "WEBP":
                frames = int(getattr(img, "n_frames", 1))
            else:
                frames = 1
            yield img, frames


# A 2- or 4-bit grey PNG's largest sample: Pillow scales its pixels to 8 bits, not its tRNS key.
_LOW_BIT_GREY = {"L;2": 3, "L;4": 15}


def png_colour_key(img: Image.Image, path: Path) -> None:
    """Make the opened PNG `img`'s colour key (tRNS of a grey or RGB PNG: images.has_transparency)
    name the value its decoded 8-bit pixels hold, as viewers compare it on the stored samples:
    Pillow scales a 2- or 4-bit grey PNG's pixels to 8 bits (2-bit 1 is 85) but keeps its key
    unscaled (1), so the keyed pixels trained in their grey; the key is scaled here (exact: 255
    is a multiple of 3 and 15). A 16-bit RGB PNG with a key is refused naming why: Pillow keeps
    each sample's high byte, where the 16-bit key cannot be told apart (pixels of the key
    opaque, others that share its high bytes transparent). 16-bit grey keeps its 16-bit samples
    (`eight_bit`); 1-bit and 8-bit keys are Pillow's own. Raises DatasetError naming the file."""
    key = img.info.get("transparency")
    if key is None or not img.tile:
        return
    rawmode = img.tile[0].args
    if rawmode in _LOW_BIT_GREY and isinstance(key, int):
        img.info["transparency"] = key * (255 // _LOW_BIT_GREY[rawmode])
    elif rawmode == "RGB;16B" and isinstance(key, tuple):
        raise _bad(
            path,
            "a 16-bit RGB PNG with a colour key (tRNS): its transparent colour cannot be told apart "
            "at the 8 bits it trains at; save it as RGBA, or at 8 bits",
        )


def file_orientation(path: Path, folder_id: FolderId | None = None) -> int:
    """The EXIF orientation (1-8) that `load_rgb` applies to the image file `path` (its header
    opened, no pixel decoded); 1 when it has none or cannot be opened."""
    try:
        with open_image(path, folder_id) as img:
            return exif_orientation(img)
    except DatasetError:
        return 1


def decode_cost(img: Image.Image) -> int:
    """What decoding the opened (possibly drafted) `img` counts against the decode budget:
    its pixels, times WEBP_DECODE_COST for a WebP."""
    return img.width * img.height * (WEBP_DECODE_COST if img.format == "WEBP" else 1)


def _check_decodes(path: Path, img: Image.Image, decode_pixels: int) -> None:
    """Cheap full-file check: JPEG decoded at 1/8 scale, WebP decoded; PNG chunk CRCs were
    already checked when the file was opened. Skipped when the decode would exceed
    `decode_pixels`."""
    if img.format == "PNG":
        return
    jpeg = img.format in ("JPEG", "MPO")
    if decode_cost(img) // (64 if jpeg else 1) > decode_pixels:
        return
    try:
        if jpeg:
            img.draft("RGB", (max(1, img.width // 8), max(1, img.height // 8)))
        img.load()
    except DECODE_ERRORS as err:
        raise _bad(path, f"corrupt ({_reason(err, path)})") from None


def _full_decode(
    path: Path, img: Image.Image, decode_pixels: int, folder_id: FolderId | None, beyond_budget: bool = False
) -> bool:
    """Decode every pixel of the opened `img` (a first check of a dataset file: data/decoded.py)
    within the decode budget: PNG, JPEG and WebP at full size when `decode_cost` fits
    `decode_pixels`; above it a JPEG at the largest reduced scale that fits (every coefficient
    is still entropy-decoded). A PNG's pixel stream is also inflated and measured without
    holding the pixels (data/png_stream.py), at any size: Pillow decodes a deflate stream that
    ends early without a word (the rows it lacks left black). Returns whether the pixels were
    decided: False for a WebP above the budget (Pillow decodes a WebP at full size only, its
    whole canvas at once: no reduced scale, no piece at a time), or a JPEG still above it at
    1/8 scale, unless `beyond_budget` (the run's own scan, the image decoded alone on the
    decode threads: data/decode_checks.check_images), which decodes it at full size as training will."""
    jpeg = img.format in ("JPEG", "MPO")
    over = decode_cost(img) > decode_pixels and not beyond_budget
    try:
        if img.format == "PNG":
            with open_in_folder(path, folder_id) as fh:
                check_png_stream(fh, path)
            if over:
                return True  # the stream's length and filters checked: every pixel accounted for
        if over and not jpeg:
            return False
        if over:
            scale = next((s for s in (2, 4, 8) if decode_cost(img) // (s * s) <= decode_pixels), 8)
            img.draft("RGB", (max(1, img.width // scale), max(1, img.height // scale)))
            if decode_cost(img) > decode_pixels:
                return False
        img.load()
    except DECODE_ERRORS as err:
        raise _bad(path, f"corrupt ({_reason(err, path)})") from None
    return True


def probe_image(
    path: Path,
    max_pixels: int,
    decode_pixels: int = DEFAULT_DECODE_PIXELS,
    folder_id: FolderId | None = None,
    *,
    colour: bool = True,
    full: bool = False,
) -> ImageInfo:
    """Check one image and return its size after EXIF transpose, on one of the process's decode
    threads (`decode_slots.run_decode`: at most two checks at once hold file or pixel data).

    The size limit is checked from the header before any decoding: width*height > max_pixels is
    refused ("oversized"). An animated image (an APNG or a WebP of more than one frame) is
    refused naming its frame count: training would take its first frame without a word. Files
    that pass are then checked for corruption cheaply (see `_check_decodes`; no decode above
    `decode_pixels`). `folder_id`: see `data.safe_open`. `colour`: whether its ICC profile must
    convert it to sRGB (data.colour; False for a loss mask: data, not colour). `full`: decode
    every pixel instead (`_full_decode`: a file's first check, data/decoded.py), so that pixel
    data cut short or garbled under a valid header is refused here rather than in a run; a
    caller that records the file as decoded asks `probe_full`, which says whether it was.
    Raises: DatasetError with one problem "<file name>: <reason>" (corrupt, oversized, animated,
    unknown format).
    """
    return run_decode(
        lambda: probe_pixels(path, max_pixels, decode_pixels, folder_id, colour=colour, full=full)
    )[0]


def probe_full(
    path: Path,
    max_pixels: int,
    decode_pixels: int = DEFAULT_DECODE_PIXELS,
    folder_id: FolderId | None = None,
    *,
    colour: bool = True,
) -> tuple[ImageInfo, bool]:
    """`probe_image(full=True)` and whether every pixel was decided (False: a WebP above
    `decode_pixels`, see `_full_decode`; it is then not to be recorded as decoded)."""
    return run_decode(
        lambda: probe_pixels(path, max_pixels, decode_pixels, folder_id, colour=colour, full=True)
    )


def probe_pixels(
    path: Path,
    max_pixels: int,
    decode_pixels: int,
    folder_id: FolderId | None,
    *,
    colour: bool = True,
    full: bool = False,
    beyond_budget: bool = False,
) -> tuple[ImageInfo, bool]:
    """probe_image's check in the calling thread (a function for the decode threads:
    decode_slots.submit_decode) and, with `full`, whether every pixel was decided
    (`_full_decode`; `beyond_budget`: a WebP above `decode_pixels` decoded too); False without."""
    decided = False
    with open_frames(path, folder_id, max_pixels) as (img, frames):
        width, height = img.size
        if width < 1 or height < 1:
            raise _bad(path, f"corrupt (size {width}x{height})")
        if frames > 1:
            kind = {"PNG": "PNG (APNG)", "WEBP": "WebP"}.get(img.format or "", img.format)
            raise _bad(
                path,
                f"animated {kind} of {frames} frames: only still images are used (training would "
                "take the first frame); save the frame you want as a still image",
            )
        if width * height > max_pixels:
            raise oversized(path, width, height, max_pixels)
        problem = profile_problem(img) if colour else None
        if problem is not None:
            raise _bad(path, problem)
        orientation = exif_orientation(img)
        if full:
            decided = _full_decode(path, img, decode_pixels, folder_id, beyond_budget)
        else:
            _check_decodes(path, img, decode_pixels)
    width, height = upright_size(width, height, orientation)
    return ImageInfo(width=width, height=height, orientation=orientation), decided


def has_transparency(img: Image.Image) -> bool:
    """Whether the opened `img` shows transparent pixels in a viewer: an alpha channel, a
    palette's transparency, or a PNG colour key (a grey or RGB PNG's tRNS: the pixels of that one
    value are transparent, as PNG optimisers store an image whose transparent pixels share one
    colour)."""
    return img.mode in _ALPHA_MODES or "transparency" in img.info


def eight_bit(img: Image.Image) -> Image.Image:
    """The decoded `img` in an 8-bit mode: 16-bit grey scaled (rounded), and any transparency
    (`has_transparency`) as an alpha channel: LA for grey, RGBA for the rest (a mode of its own
    alpha kept). What `to_rgb` and `mask_grey` start from."""
    key = img.info.get("transparency")
    if img.mode in ("I;16", "I;16L", "I;16B", "I;16N", "I"):
        arr = np.asarray(img, dtype=np.float64)  # [H, W] 16-bit range
        grey = Image.fromarray(np.clip(arr / 257.0 + 0.5, 0, 255).astype(np.uint8), mode="L")
        if not isinstance(key, int):
            return grey
        alpha = Image.fromarray(np.where(arr == key, 0, 255).astype(np.uint8), mode="L")  # [H, W]
        return Image.merge("LA", (grey, alpha))
    if key is None or img.mode in _ALPHA_MODES:
        return img
    return img.convert("LA" if img.mode in ("1", "L") else "RGBA")  # Pillow applies the key


def to_rgb(img: Image.Image, icc: bytes | None = None) -> Image.Image:
    """Convert any decoded mode to sRGB RGB; transparency (`has_transparency`: a PNG colour key
    too) is composited onto white. `icc`: the image's embedded ICC profile
    (`img.info["icc_profile"]` as opened; a reduced copy may have lost it), converted from
    (data.colour); None: the pixels are taken as sRGB.
    Raises: data.colour.ProfileError if `icc` cannot convert this image (probe_image refuses it)."""
    img = eight_bit(img)
    if icc:
        alpha = img.convert("RGBA").getchannel("A") if img.mode in _ALPHA_MODES else None
        return to_srgb(img, icc, alpha)
    if img.mode in _ALPHA_MODES:
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img if img.mode == "RGB" else img.convert("RGB")


def mask_grey(img: Image.Image) -> Image.Image:
    """A decoded loss-mask file (a dataset's masks/, data/masks.py) as the mask it trains with:
    "L", white = trained fully. Its grey value (an RGB mask's luma, a 16-bit one scaled to 8 bits)
    times its opacity where it has transparency (`has_transparency`): a transparent pixel weighs as
    black (unmasked_weight), as `alpha_mask` reads transparency, whatever colour it stores (white
    painted on a transparent layer masks what it covers; composited onto white, as an image is,
    the mask was white everywhere). Its ICC profile is not applied: a mask is data, not colour."""
    img = eight_bit(img)
    if img.mode in _ALPHA_MODES:
        rgba = img.convert("RGBA")
        return ImageChops.multiply(rgba.convert("RGB").convert("L"), rgba.getchannel("A"))
    return to_rgb(img).convert("L")


def load_rgb(path: Path, folder_id: FolderId | None = None) -> Image.Image:
    """Decode an image fully, apply its EXIF orientation and return it as sRGB RGB (converted
    from its embedded ICC profile: data.colour; the training worker's decode: bounded by
    max_image_pixels at scan time, not by the server's budget).

    Raises: DatasetError (one problem naming the file) if it cannot be decoded, is a link, or
    its folder is no longer `folder_id`.
    """
    with open_image(path, folder_id) as img:
        orientation = exif_orientation(img)
        icc = img.info.get("icc_profile")
        try:
            img.load()
            rgb = to_rgb(img, icc)
        except ProfileError as err:
            raise _bad(path, str(err)) from None
        except DECODE_ERRORS as err:
            raise _bad(path, f"corrupt ({_reason(err, path)})") from None
    fix = ORIENTATION_FIX.get(orientation)
    return rgb.transpose(fix) if fix is not None else rgb
