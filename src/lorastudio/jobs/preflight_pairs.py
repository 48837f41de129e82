"""The preflight report's paired-dataset parts: what the run trains (text-to-image, edit or
both, for a family that takes control images) and the pairs it found (data/pairs.py)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from lorastudio import families
from lorastudio.data import DatasetScan
from lorastudio.data.control_sizing import ControlRule, rule_label


def training_mode(family: str, scan: DatasetScan) -> dict[str, Any]:
    """What the run trains, for a family that takes control images: {"kind": "text-to-image" |
    "edit" | "mixed" | None (a text-to-image-only family), "note": a sentence saying it}. A
    family taking 0..K controls (FLUX.2) trains text-to-image on a dataset without controls,
    reference editing on a paired one, and both on a mixed one."""
    high = families.get(family).spec.control_images[1]
    paired = sum(1 for it in scan.items if it.controls)
    if high == 0:
        return {"kind": None, "note": None}
    if paired == 0:
        return {
            "kind": "text-to-image",
            "note": f"no control images: {family} trains text-to-image here (add control/ images with the "
            f"targets' names to train editing with up to {high} reference image(s))",
        }
    unpaired = len(scan.items) - paired
    if unpaired:
        return {
            "kind": "mixed",
            "note": f"{paired} edit sample(s) with reference images and {unpaired} text-to-image sample(s) "
            f"without: {family} trains both (each batch holds samples of one kind)",
        }
    counts = sorted({len(it.controls) for it in scan.items})
    each = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return {"kind": "edit", "note": f"every sample edits with its reference images ({each} per sample)"}


def _item_sizes(item: Any) -> list[str]:
    """One item's controls as "WxH -> wxh" (source -> trained size; the bucket for "target")."""
    sizes = item.control_sizes or (item.bucket,) * len(item.controls)
    dims = item.control_dims or sizes
    return [f"{sw}x{sh} -> {tw}x{th}" for (sw, sh), (tw, th) in zip(dims, sizes, strict=False)]


def control_size_lines(scan: DatasetScan, label: str, limit: int = 8) -> list[str]:
    """How the controls are sized, one line per distinct (source size -> trained size), most
    frequent first: "1024x1024 -> 1056x992 (pipeline ~1 MP)", " x N" when N controls share it.
    A control of the "target" rule takes its target's bucket."""
    counts: Counter[tuple[tuple[int, int], tuple[int, int]]] = Counter()
    for item in scan.items:
        sizes = item.control_sizes or (item.bucket,) * len(item.controls)
        counts.update(zip(item.control_dims or sizes, sizes, strict=False))
    return [
        f"{sw}x{sh} -> {tw}x{th} ({label})" + (f" x {n}" if n > 1 else "")
        for ((sw, sh), (tw, th)), n in counts.most_common(limit)
    ]


def controls_section(
    scan: DatasetScan, rule: ControlRule = "target", family: str | None = None
) -> dict[str, Any] | None:
    """Paired datasets: pairs, unpaired targets (a mixed dataset), the most controls per image,
    where they came from, and how controls are sized for the run's control_resolution `rule`
    (data/control_sizing.py: `rule` in words, `sizes` its source -> trained sizes, `resize`)."""
    per_image = scan.controls_per_image()
    if per_image == 0:
        return None
    sizing = families.get(family).spec.control_sizing if family else None
    label = rule_label(sizing, rule)
    if scan.controls_sized():
        resize = f"each control is resized whole to the size its pipeline encodes a reference at ({label})"
    else:
        resize = "each control is resized to cover its target's bucket and cropped like the target"
    return {
        "rule": label,
        "sizes": control_size_lines(scan, label),
        "pairs": sum(1 for it in scan.items if it.controls),
        "unpaired": sum(1 for it in scan.items if not it.controls),  # text-to-image samples of a mixed set
        "per_image": per_image,  # the most of one sample
        "sources": list(scan.control_sources),
        "buckets": scan.bucket_histogram(),
        "resize": resize,
        "examples": [
            {
                "target": it.path.name,
                "controls": [
                    str(c.relative_to(scan.root)) if c.is_relative_to(scan.root) else str(c)
                    for c in it.controls
                ],
                "sizes": _item_sizes(it),  # each control's source -> trained size
            }
            for it in scan.items[:20]
        ],
    }
