"""The scan of one dataset folder with a run's settings: data.scan_dataset with the config's
resolution, buckets, captions and the family's resolution multiple and control images, then the
loss masks attached (data/masks.py). The one call of the engine's preflight, the job service's
validation and its resume check, for the dataset and for a validation folder (data/holdout.py).
No torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lorastudio.data.items import DatasetScan
from lorastudio.data.masks import attach_masks
from lorastudio.data.scan import scan_dataset

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.families.base import FamilySpec
    from lorastudio.settings import Settings


def scan_for_run(
    folder: Path,
    cfg: TrainConfig,
    spec: FamilySpec,
    settings: Settings,
    control_dirs: Sequence[Path] = (),
    control_images: tuple[int, int] | None = None,
) -> DatasetScan:
    """Scan `folder` for a run of `cfg` (resolved) on the family `spec`, with the host limits of
    `settings`; `control_dirs`: the run's parallel control folders (data/pairs.py);
    `control_images`: the (min, max) controls of the checkpoint's flavour (Family.
    source_control_images; default the family's spec.control_images). Raises what
    scan_dataset and attach_masks raise (DatasetError; ConfigError naming a mask setting)."""
    scan = scan_dataset(
        folder,
        resolution=int(cfg.resolution or 0),
        multiple=spec.resolution_multiple,
        aspect_buckets=cfg.aspect_buckets,
        no_upscale=cfg.no_upscale,
        trigger_word=cfg.trigger_word,
        default_caption=cfg.default_caption,
        max_pixels=settings.max_image_pixels,
        decode_pixels=settings.max_decode_pixels,
        control_dirs=control_dirs,
        control_images=spec.control_images if control_images is None else control_images,
        family=spec.name,
    )
    return attach_masks(
        scan,
        alpha_mask=cfg.alpha_mask,
        unmasked_weight=cfg.unmasked_weight,
        max_pixels=settings.max_image_pixels,
        decode_pixels=settings.max_decode_pixels,
    )
