"""How control (reference) images are sized for training: the rule a run picks
(TrainConfig.control_resolution) applied with the family's pipeline rule (FamilySpec.control_sizing).

  * "pipeline" (the default): each control at the size its family's edit pipeline encodes a
    reference at, from the control's own aspect ratio, whatever its target's bucket:
    - "area" (Qwen-Image-Edit / Edit-Plus: calculate_dimensions): the side ratio kept at an
      area of ~1 MP, each side rounded to a multiple of 32, resized to exactly that (stretched);
    - "preferred" (FLUX.1 Kontext: PREFERRED_KONTEXT_RESOLUTIONS): the preferred resolution
      nearest the control's aspect ratio, resized to it (stretched);
    - "cap_area" (FLUX.2 / klein): scaled down to ~1 MP when larger (never up), each side floored
      to a multiple of 16, centre-cropped to it;
  * "target": each control resized to cover its target's bucket and cropped like the target
    (data.pairs.load_control_crop), lorastudio's sizing before this setting;
  * an int N: the pipeline's rule at an area of N x N pixels instead of its own (for "cap_area"
    the cap; for "preferred" the side ratio kept, rounded as "area" does). The name is
    musubi-tuner's (its dataset option sets a fixed control (width, height)).

The arithmetic mirrors the diffusers 0.42.1 pipelines' own (they are the reference:
tests/unit/data/test_data_control_sizing.py compares sizes and pixels with the pipelines'
functions on the same images); it is written here because the server computes the sizes for the
preflight without importing diffusers. No torch here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
from PIL import Image

from lorastudio.data.images import load_rgb

if TYPE_CHECKING:
    from lorastudio.data.safe_open import FolderId

ControlRule = Literal["pipeline", "target"] | int
Size = tuple[int, int]  # (width, height) pixels

# FluxKontextPipeline's PREFERRED_KONTEXT_RESOLUTIONS (diffusers 0.42.1), (width, height); a test
# checks they are the pipeline's
KONTEXT_RESOLUTIONS: tuple[Size, ...] = (
    (672, 1568), (688, 1504), (720, 1456), (752, 1392), (800, 1328), (832, 1248), (880, 1184),
    (944, 1104), (1024, 1024), (1104, 944), (1184, 880), (1248, 832), (1328, 800), (1392, 752),
    (1456, 720), (1504, 688), (1568, 672),
)  # fmt: skip


class ControlTooSmall(ValueError):
    """A control the pipeline's rule sizes to a side under its multiple (0 px: a control under
    16 px a side, or one far from square at the rule's area): its pipeline cannot encode it
    either (diffusers divides by, or crops to, a zero side)."""


@dataclass(frozen=True)
class ControlSizing:
    """A family edit pipeline's rule for the size it encodes a reference image at (see the
    module docstring): `kind`, the pipeline's `area` (pixels), the `multiple` sides are rounded
    to, the `resolutions` a "preferred" rule picks from, and a short `label` for the preflight."""

    kind: Literal["area", "preferred", "cap_area"]
    area: int = 1024 * 1024
    multiple: int = 16
    resolutions: tuple[Size, ...] = ()
    label: str = "~1 MP"

    def size(self, width: int, height: int, area: int | None = None) -> Size:
        """The (width, height) a control of width x height is encoded at, at the pipeline's own
        area (None) or `area` (the int rule: "preferred" then keeps the side ratio at that area).
        Raises ControlTooSmall when a side would be under the multiple (RELIABILITY 1040: a
        ZeroDivisionError, or a 0-px side, before)."""
        try:
            w, h = self._size(width, height, area)
        except ZeroDivisionError:  # "preferred": a side floored to 0 before the ratio is taken
            w, h = 0, 0
        if min(w, h) < self.multiple:
            raise ControlTooSmall(
                f"{width}x{height} is sized to {w}x{h} by its pipeline's reference rule ({self.label}): a side "
                f"under {self.multiple} px, which the pipeline cannot encode; use a control of at least "
                f"{self.multiple} px a side and nearer square"
            )
        return w, h

    def _size(self, width: int, height: int, area: int | None) -> Size:
        """`size` without its check."""
        if self.kind == "cap_area":
            cap = self.area if area is None else area
            if width * height > cap:  # Flux2ImageProcessor._resize_to_target_area
                scale = math.sqrt(cap / (width * height))
                width, height = int(width * scale), int(height * scale)
            return (width // self.multiple) * self.multiple, (height // self.multiple) * self.multiple
        if self.kind == "preferred" and area is None:
            m = self.multiple  # get_default_height_width floors the source to the multiple first
            ratio = (width // m * m) / (height // m * m)
            _, w, h = min((abs(ratio - w / h), w, h) for w, h in self.resolutions)
            return w // m * m, h // m * m
        # calculate_dimensions(area, ratio): the ratio kept, each side rounded to the multiple
        ratio = width / height
        side_w = math.sqrt((self.area if area is None else area) * ratio)
        side_h = side_w / ratio
        return round(side_w / self.multiple) * self.multiple, round(side_h / self.multiple) * self.multiple

    @property
    def crops(self) -> bool:
        """The pipeline centre-crops to the size (FLUX.2) rather than stretching to it."""
        return self.kind == "cap_area"


def rule_area(rule: ControlRule) -> int | None:
    """The area (pixels) an int rule sets; None for "pipeline" (the pipeline's own) and "target"."""
    return None if rule in ("pipeline", "target") else int(rule) ** 2


def control_size(sizing: ControlSizing | None, rule: ControlRule, width: int, height: int) -> Size | None:
    """The size a control of width x height is trained at under `rule`, or None for "target"
    (or a family without a pipeline rule): the control then takes its target's bucket."""
    if sizing is None or rule == "target":
        return None
    return sizing.size(width, height, rule_area(rule))


def rule_label(sizing: ControlSizing | None, rule: ControlRule) -> str:
    """The rule in words for the preflight: "pipeline ~1 MP", "target bucket", "768x768 area"."""
    if sizing is None or rule == "target":
        return "target bucket"
    if rule == "pipeline":
        return f"pipeline {sizing.label}"
    return f"{int(rule)}x{int(rule)} area"


def load_control_sized(
    path: Path,
    size: Size,
    sizing: ControlSizing,
    *,
    flip: bool,
    folder_id: FolderId | None = None,
    area: int | None = None,
) -> np.ndarray:
    """A control image sized as its pipeline sizes a reference (ControlSizing), flipped with its
    target when `flip`: [3, H, W] float32 in [-1, 1] (the pipelines' x / 255 * 2 - 1). `size`:
    control_size's for the run's rule; `area`: the int rule's area (None: the pipeline's).
    Raises DatasetError if the file cannot be decoded, is a link, or its folder changed."""
    img = sized_image(load_rgb(path, folder_id), size, sizing, area)
    arr = np.asarray(img, dtype=np.uint8)  # [H, W, 3]
    if flip:
        arr = arr[:, ::-1]
    pixels = (arr.astype(np.float32) / 255.0) * 2.0 - 1.0  # [H, W, 3]
    return np.ascontiguousarray(pixels.transpose(2, 0, 1), dtype=np.float32)  # [3, H, W]


def sized_image(img: Image.Image, size: Size, sizing: ControlSizing, area: int | None = None) -> Image.Image:
    """`img` (RGB) at `size` (control_size's) as the pipeline resizes it. "cap_area" (FLUX.2):
    first scaled down to the cap (`area`, else the pipeline's; Lanczos, int sides) when larger,
    then centre-cropped to `size`; the others: resized (Lanczos) straight to `size`."""
    if not sizing.crops:
        return img if img.size == size else img.resize(size, Image.Resampling.LANCZOS)
    cap = sizing.area if area is None else area
    if img.width * img.height > cap:  # Flux2ImageProcessor._resize_to_target_area
        scale = math.sqrt(cap / (img.width * img.height))
        img = img.resize((int(img.width * scale), int(img.height * scale)), Image.Resampling.LANCZOS)
    w, h = size
    left, top = (img.width - w) // 2, (img.height - h) // 2  # Flux2ImageProcessor._resize_and_crop
    return img.crop((left, top, left + w, top + h))
