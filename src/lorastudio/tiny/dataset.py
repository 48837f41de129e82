"""A small synthetic dataset: coloured shapes on plain backgrounds with .txt caption sidecars.

8 PNG images (six 64x64, one 96x64 landscape, one 64x96 portrait, so aspect-ratio buckets get
used), each with a caption like "a red circle on a blue background". Everything is derived from
the seed with `random.Random`, so the files are byte-identical in every process.
"""

from __future__ import annotations

import io
import math
import random
from dataclasses import dataclass

from PIL import Image, ImageDraw

SAMPLE_COUNT = 8
SAMPLE_SIZES: tuple[tuple[int, int], ...] = ((64, 64),) * 6 + ((96, 64), (64, 96))  # (width, height)
RGB: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 40),
    "green": (40, 170, 60),
    "blue": (30, 70, 210),
    "yellow": (240, 210, 40),
    "orange": (245, 135, 25),
    "purple": (130, 50, 170),
    "white": (245, 245, 245),
    "black": (15, 15, 15),
}
SHAPE_NAMES: tuple[str, ...] = ("circle", "square", "triangle", "diamond", "ring", "cross", "star")


@dataclass(frozen=True)
class SampleItem:
    """One sample: file stem, caption text and the PNG bytes."""

    stem: str
    caption: str
    png: bytes


def sample_items(seed: int = 0) -> list[SampleItem]:
    """The SAMPLE_COUNT items of the sample dataset for `seed` (pure; same result in any process)."""
    rng = random.Random(seed)
    shapes = rng.sample(SHAPE_NAMES, len(SHAPE_NAMES))
    shapes += [rng.choice(SHAPE_NAMES) for _ in range(SAMPLE_COUNT - len(shapes))]
    colours = list(RGB)
    items = []
    for index, (shape, (width, height)) in enumerate(zip(shapes, SAMPLE_SIZES, strict=True)):
        fg, bg = rng.sample(colours, 2)
        image = Image.new("RGB", (width, height), RGB[bg])
        side = min(width, height)
        radius = rng.randint(side // 5, side * 2 // 5)
        cx = rng.randint(radius, width - radius)
        cy = rng.randint(radius, height - radius)
        _draw_shape(ImageDraw.Draw(image), shape, cx, cy, radius, RGB[fg])
        buffer = io.BytesIO()
        image.save(buffer, format="PNG", optimize=False, compress_level=6)
        caption = f"{_article(fg)} {fg} {shape} on {_article(bg)} {bg} background"
        items.append(SampleItem(stem=f"shape_{index:02d}", caption=caption, png=buffer.getvalue()))
    return items


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def expected_files(seed: int = 0) -> dict[str, bytes]:
    """File name -> bytes of the whole dataset: `<stem>.png` and `<stem>.txt` per item."""
    files: dict[str, bytes] = {}
    for item in sample_items(seed):
        files[f"{item.stem}.png"] = item.png
        files[f"{item.stem}.txt"] = (item.caption + "\n").encode("utf-8")
    return files


Colour = tuple[int, int, int]


def _star(r: int) -> list[tuple[float, float]]:
    """Ten points (outer, inner, ...) of a five-pointed star of outer radius r around (0, 0)."""
    return [
        (
            (r if k % 2 == 0 else r * 0.45) * math.cos(-math.pi / 2 + k * math.pi / 5),
            (r if k % 2 == 0 else r * 0.45) * math.sin(-math.pi / 2 + k * math.pi / 5),
        )
        for k in range(10)
    ]


def _draw_shape(draw: ImageDraw.ImageDraw, shape: str, cx: int, cy: int, r: int, fill: Colour) -> None:
    """Draw `shape` (one of SHAPE_NAMES; KeyError otherwise) of radius r centred at (cx, cy)."""
    box = (cx - r, cy - r, cx + r, cy + r)
    arm = max(2, r // 3)
    painters = {
        "circle": lambda: draw.ellipse(box, fill=fill),
        "square": lambda: draw.rectangle(box, fill=fill),
        "ring": lambda: draw.ellipse(box, outline=fill, width=arm),
        "triangle": lambda: draw.polygon([(cx, cy - r), (cx + r, cy + r), (cx - r, cy + r)], fill=fill),
        "diamond": lambda: draw.polygon([(cx, cy - r), (cx + r, cy), (cx, cy + r), (cx - r, cy)], fill=fill),
        "cross": lambda: (
            draw.rectangle((cx - r, cy - arm, cx + r, cy + arm), fill=fill),
            draw.rectangle((cx - arm, cy - r, cx + arm, cy + r), fill=fill),
        ),
        "star": lambda: draw.polygon([(cx + x, cy + y) for x, y in _star(r)], fill=fill),
    }
    painters[shape]()
