"""Colour management of dataset images: an embedded ICC profile converted to sRGB (no torch).

Cameras, phones and editors tag their images with the colour space the numbers are in (Display
P3 from phones, Adobe RGB from cameras and editors, a press profile on a CMYK JPEG, a grey gamma
on a scan). Every viewer converts such an image to the screen's colours, and the models were
trained on sRGB; read as if they were sRGB, a P3 or Adobe RGB photo trains duller and
shifted (Adobe RGB (180, 120, 60) is sRGB (199, 121, 53)). So an image with an embedded ICC
profile is converted from it to sRGB (littleCMS through Pillow's ImageCms, perceptual intent,
which for the matrix profiles of RGB and grey spaces is the colorimetric mapping viewers use)
before it trains, and its thumbnail goes through the same conversion (`images.to_rgb`).

An image whose profile cannot be read, or does not fit its pixels (an RGB profile on a grey
image, a CMYK profile on an RGB one), is refused when it is checked (`profile_problem`, called by
`images.probe_image`: scans and uploads), naming why, instead of training in colours no viewer
shows. So is one whose profile is over MAX_PROFILE_BYTES (read per image, it would cost memory
and time) or malformed (littleCMS's errors are refusals, never a crash). An image without a
profile is taken as sRGB, as viewers do.
"""

from __future__ import annotations

import hashlib
import io
import threading
from collections import OrderedDict
from typing import cast

from PIL import Image, ImageCms

# The ICC colour space of a profile -> the 8-bit Pillow mode its pixels are converted from.
WORKING_MODE = {"RGB": "RGB", "GRAY": "L", "CMYK": "CMYK"}
# Image modes whose pixels each working mode reads (after to_rgb's 16-bit and palette steps).
_FITS = {
    "RGB": frozenset({"RGB", "RGBA", "RGBX", "RGBa", "P", "PA"}),
    "L": frozenset({"L", "LA", "La", "1", "I", "I;16", "I;16L", "I;16B", "I;16N"}),
    "CMYK": frozenset({"CMYK"}),
}
_TRANSFORMS = 32  # profiles kept built (a dataset holds few distinct ones)
# The largest profile read: press and printer profiles (4-D CLUTs) reach a few MB; a JPEG can
# carry ~16 MB in APP2 segments, which only costs memory and time per image.
MAX_PROFILE_BYTES = 8 * 2**20
# sha256 of a profile -> its (working mode, transform) or why it cannot convert; the bytes
# themselves are not kept (32 hostile profiles of 8 MB would pin 256 MB).
_BUILT: OrderedDict[bytes, tuple[str, ImageCms.ImageCmsTransform] | str] = OrderedDict()
_BUILT_LOCK = threading.Lock()


class ProfileError(ValueError):
    """An embedded ICC profile that cannot be read or applied to the image's pixels."""


def _transform(icc: bytes) -> tuple[str, ImageCms.ImageCmsTransform]:
    """(working mode, transform to sRGB RGB) of the profile bytes `icc`, built once per distinct
    profile (the last _TRANSFORMS kept, a refusal too). Raises ProfileError."""
    if len(icc) > MAX_PROFILE_BYTES:
        raise ProfileError(
            f"its embedded ICC colour profile is {len(icc) / 2**20:.1f} MB, larger than "
            f"{MAX_PROFILE_BYTES // 2**20} MB"
        )
    key = hashlib.sha256(icc).digest()
    with _BUILT_LOCK:
        built = _BUILT.get(key)
        if built is not None:
            _BUILT.move_to_end(key)
    if built is None:
        try:
            built = _build(icc)
        except ProfileError as err:
            built = str(err)
        with _BUILT_LOCK:
            _BUILT[key] = built
            while len(_BUILT) > _TRANSFORMS:
                _BUILT.popitem(last=False)
    if isinstance(built, str):
        raise ProfileError(built)
    return built


def _build(icc: bytes) -> tuple[str, ImageCms.ImageCmsTransform]:
    """(working mode, transform to sRGB RGB) of the profile bytes `icc`. Raises ProfileError."""
    try:
        profile = ImageCms.ImageCmsProfile(io.BytesIO(icc))
    except (OSError, ValueError, TypeError, ImageCms.PyCMSError) as err:  # PyCMSError: an Exception
        raise ProfileError(f"its embedded ICC colour profile cannot be read ({err})") from None
    space = profile.profile.xcolor_space.strip()
    mode = WORKING_MODE.get(space)
    if mode is None:
        raise ProfileError(f"its embedded ICC colour profile is for {space or 'an unknown'} colours")
    try:
        transform = ImageCms.buildTransform(profile, ImageCms.createProfile("sRGB"), mode, "RGB")
    except (OSError, ValueError, TypeError, ImageCms.PyCMSError) as err:  # a malformed tag
        raise ProfileError(f"its embedded ICC colour profile cannot be converted to sRGB ({err})") from None
    return mode, transform


def _fitted(icc: bytes, image_mode: str) -> tuple[str, ImageCms.ImageCmsTransform]:
    mode, transform = _transform(icc)
    if image_mode not in _FITS[mode]:
        space = next(s for s, m in WORKING_MODE.items() if m == mode)
        raise ProfileError(
            f"its embedded ICC colour profile is for {space} colours but the image is {image_mode}"
        )
    return mode, transform


def profile_problem(img: Image.Image) -> str | None:
    """Why the opened (not yet decoded) `img`'s embedded ICC profile cannot convert it to sRGB,
    ending in what to do; None when it has none or it can."""
    icc = img.info.get("icc_profile")
    if not icc:
        return None
    try:
        _fitted(bytes(icc), img.mode)
    except ProfileError as err:
        return f"{err}: save it again as sRGB (or without its colour profile)"
    return None


def to_srgb(img: Image.Image, icc: bytes, alpha: Image.Image | None) -> Image.Image:
    """`img` (decoded, in a mode `profile_problem` accepted, 16-bit grey already 8-bit) converted
    from its ICC profile `icc` to sRGB RGB; `alpha` (the image's alpha channel, or None) is then
    composited onto white as `images.to_rgb` does. Raises ProfileError."""
    mode, transform = _fitted(icc, img.mode)
    rgb = cast(Image.Image, ImageCms.applyTransform(img.convert(mode), transform))  # None only inPlace
    if alpha is None:
        return rgb
    background = Image.new("RGB", rgb.size, (255, 255, 255))
    return Image.composite(rgb, background, alpha)
