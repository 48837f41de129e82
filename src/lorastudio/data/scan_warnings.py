"""The warnings a run's dataset scan gives (no torch): the one list the job service's preflight
shows (`dataset.warnings`: web Train page, `train --check`) and a run states in its log when it
starts (training/preflight.py logs each), so a run started without a preflight says every one
of them too. Before, the run logged four of the seven (upscale, crop, caption variation, masks):
an image cut to its bucket's shape, a validation image that is a training image too and images
not decoded yet were said by the preflight only (RELIABILITY 787)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lorastudio.config_samples import unapplied_sample_guidance_warning
from lorastudio.config_schedule import ema_horizon_warning, unused_steps_warning
from lorastudio.data.caption_chars import hidden_text_warning, kept_markup_warning
from lorastudio.data.caption_variants import variation_warning
from lorastudio.data.crop import crop_warning, cut_warning
from lorastudio.data.decoded import FULL_DECODE_BUDGET_S
from lorastudio.data.duplicates import duplicate_warning
from lorastudio.data.entries import run_steps
from lorastudio.data.holdout import overlap_warning
from lorastudio.data.items import ImageItem, item_name
from lorastudio.data.mask_blank import blank_mask_warning
from lorastudio.data.masks import mask_warning
from lorastudio.data.upscaling import upscale_warning

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.data import DatasetScan
    from lorastudio.data.holdout import Holdout


def scan_warnings(scan: DatasetScan, cfg: TrainConfig, holdout: Holdout | None) -> list[str]:
    """Every warning about `scan` (the run's training images, the validation images held out in
    `holdout`) under `cfg`, in the preflight's order; last, the run's settings against its length
    over `scan` (an EMA too slow for it: config_schedule.ema_horizon_warning; a `steps` an epoch run
    does not use: unused_steps_warning) and sample prompts'
    guidance a true-CFG family's previews do not apply (config_samples)."""
    labels = scan.labels()
    found = [
        upscale_warning(scan.items, cfg.no_upscale, labels),
        crop_warning(scan.items, cfg.random_crop, labels),
        cut_warning(scan.items, cfg.aspect_buckets, labels),
        variation_warning(scan, labels),
        mask_warning(scan.items, labels),
        blank_mask_warning(scan.items, cfg.unmasked_weight, labels, random_crop=cfg.random_crop),
        overlap_warning(holdout),
        undecoded_warning(scan.items, labels),
        duplicate_warning(scan.items, labels),
        hidden_text_warning(scan.items, labels),
        kept_markup_warning(scan.items, labels),  # a resume's only (RELIABILITY 1750)
        ema_horizon_warning(cfg, run_steps(cfg, scan)[0]),
        unused_steps_warning(cfg, run_steps(cfg, scan)[0]),
        unapplied_sample_guidance_warning(cfg),
    ]
    return [w for w in found if w]


def undecoded_warning(items: Sequence[ImageItem], labels: Sequence[str] = ()) -> str | None:
    """The preflight report's word on the files a check left to the header check alone (its time
    budget spent, or a WebP above max_decode_pixels: data/decode_checks.py): images (ImageItem.decoded False), control images (`controls_decoded`) and
    loss masks of masks/ (MaskRef.decoded), each kind counted and named, each file once (an
    image at several resolutions, a control of several targets); None when every file was fully
    decoded. `labels`: the entries' labels (DatasetScan.labels) for the names."""
    from lorastudio.data.pairs import folder_label

    kinds: dict[str, dict[Path, str]] = {"image(s)": {}, "control image(s)": {}, "loss mask(s)": {}}
    for item in items:
        prefix = f"{labels[item.entry]}/" if labels else ""
        if not item.decoded:
            kinds["image(s)"].setdefault(item.path, item_name(item, labels))
        for control, done in zip(item.controls, item.controls_decoded, strict=False):
            if not done:
                kinds["control image(s)"].setdefault(
                    control, f"{prefix}{folder_label(item.path.parent, control.parent)}{control.name}"
                )
        if item.mask is not None and not item.mask.alpha and not item.mask.decoded:
            kinds["loss mask(s)"].setdefault(
                item.mask.path,
                f"{prefix}{folder_label(item.path.parent, item.mask.path.parent)}{item.mask.path.name}",
            )
    left = {kind: list(names.values()) for kind, names in kinds.items() if names}
    if not left:
        return None
    counts = [f"{len(names)} {kind}" for kind, names in left.items()]
    counted = counts[0] if len(counts) == 1 else f"{', '.join(counts[:-1])} and {counts[-1]}"
    shown = "; ".join(
        ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        for names in left.values()
    )
    return (
        f"{counted} not fully decoded yet ({shown}): a check decodes new files for at most "
        f"{FULL_DECODE_BUDGET_S:.0f} s, and a WebP only within max_decode_pixels (4x its pixels); "
        "the run decodes these before its models load (and fails "
        "naming any whose pixels do not decode)"
    )
