"""The warnings a run's dataset scan gives (no torch): the one list the job service's preflight
shows (`dataset.warnings`: web Train page, `train --check`) and a run states in its log when it
starts (training/preflight.py logs each), so a run started without a preflight says every one
of them too. Before, the run logged four of the seven (upscale, crop, caption variation, masks):
an image cut to its bucket's shape, a validation image that is a training image too and images
not decoded yet were said by the preflight only (RELIABILITY 787)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lorastudio.config_samples import unapplied_sample_guidance_warning
from lorastudio.config_schedule import ema_horizon_warning, unused_steps_warning
from lorastudio.data.caption_chars import hidden_text_warning, kept_markup_warning
from lorastudio.data.caption_variants import variation_warning
from lorastudio.data.crop import crop_warning, cut_warning
from lorastudio.data.decoded import undecoded_warning
from lorastudio.data.duplicates import duplicate_warning
from lorastudio.data.entries import run_steps
from lorastudio.data.holdout import overlap_warning
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
