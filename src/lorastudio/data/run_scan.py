"""The scan of a run's dataset with its settings: every dataset entry (data/entries.py:
data.scan_dataset with the entry's resolution(s) and captions and the family's resolution
multiple and control images, joined), each entry's loss masks attached (data/masks.py) before
the join. The one call of the engine's preflight, the job service's validation and its resume
check, for the dataset entries and for a validation folder (data/holdout.py). No torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from lorastudio.config_datasets import resolution_list
from lorastudio.data.control_sizing import ControlRule, ControlTooSmall, control_size
from lorastudio.data.decode_progress import DecodeProgress
from lorastudio.data.entries import scan_entries
from lorastudio.data.items import DatasetScan
from lorastudio.data.masks import attach_masks, masked_setting_problems
from lorastudio.data.mix import MixEntry
from lorastudio.errors import ConfigError, DatasetError, FieldProblem

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.families.base import FamilySpec
    from lorastudio.settings import Settings


def scan_for_run(
    source: Path | Sequence[MixEntry],
    cfg: TrainConfig,
    spec: FamilySpec,
    settings: Settings,
    control_dirs: Sequence[Path] = (),
    control_images: tuple[int, int] | None = None,
    decode_budget_s: float | None = None,
    progress: DecodeProgress | None = None,
    resume: bool = False,
    controls_then: Mapping[Path, Path] | None = None,
) -> DatasetScan:
    """Scan `source` for a run of `cfg` (resolved) on the family `spec`, with the host limits of
    `settings`. `source`: the run's entries (data.entries.resolve_entries), or one folder (a
    validation folder: scanned as one entry with the run's captions and resolution(s));
    `control_dirs`: the run's parallel control folders (data/pairs.py); `control_images`: the
    (min, max) controls of the checkpoint's flavour (Family.source_control_images; default the
    family's spec.control_images); `decode_budget_s`: the seconds each folder's scan spends fully
    decoding images its record (data/decoded.py) does not list as they are now (None: the
    checks' FULL_DECODE_BUDGET_S; math.inf: all of them, as the run's own preflight does, so
    that no image trains on the header check alone); `progress`: the run's count of those full
    decodes (targets, controls, masks of every entry; reported at a bounded rate) and its stop
    check before each (data/decode_progress.py; None: neither); `resume`: the scan of a run
    that continues a checkpoint, whose captions with another trainer's markup are kept as the
    checkpoint trained them (data.scan.scan_dataset's keep_markup; a fresh run's are refused);
    `controls_then`: its fingerprint under rule 1, the controls' paths as a checkpoint of that
    rule recorded them (data.scan.dataset_fingerprint; training/resume/identity_dataset.py).
    Raises what scan_entries and
    attach_masks raise (DatasetError; ConfigError naming a mask setting), and what the stop
    check raises (errors.TrainingStopped).
    """
    validation_folder = isinstance(source, Path)
    if isinstance(source, Path):
        source = [
            MixEntry(
                label=str(source),
                root=source,
                trigger_word=cfg.trigger_word,
                default_caption=cfg.default_caption,
                resolutions=tuple(resolution_list(cfg.resolution)) or (0,),
            )
        ]
    scan = scan_entries(
        source,
        multiple=spec.resolution_multiple,
        aspect_buckets=cfg.aspect_buckets,
        no_upscale=cfg.no_upscale,
        max_pixels=settings.max_image_pixels,
        decode_pixels=settings.max_decode_pixels,
        control_dirs=control_dirs,
        control_images=spec.control_images if control_images is None else control_images,
        family=spec.name,
        decoded_dir=settings.decoded_record_dir,
        decode_budget_s=decode_budget_s,
        progress=progress,
        keep_markup=resume,
        controls_then=controls_then,
        prepare=partial(
            attach_masks,
            alpha_mask=cfg.alpha_mask,
            max_pixels=settings.max_image_pixels,
            decode_pixels=settings.max_decode_pixels,
            decoded_dir=settings.decoded_record_dir,
            decode_budget_s=decode_budget_s,
            progress=progress,
        ),
    )
    if not validation_folder:  # the mask settings are the run's: asked of all its entries at once
        problems = masked_setting_problems(scan, cfg.alpha_mask, cfg.unmasked_weight)
        if problems:
            raise ConfigError(problems)
    return with_control_sizes(scan, spec, cfg.control_resolution)


def with_control_sizes(scan: DatasetScan, spec: FamilySpec, rule: ControlRule) -> DatasetScan:
    """`scan` with each control's training size set (ImageItem.control_sizes) for the run's
    control_resolution `rule` and the family's pipeline rule (data/control_sizing.py); as it is
    for "target" (controls take their targets' buckets) or a family without controls."""
    if rule == "target" or spec.control_sizing is None or not scan.controls_per_image():
        return scan
    items, problems = [], []
    for it in scan.items:
        sizes = []
        for path, (w, h) in zip(it.controls, it.control_dims, strict=False):
            try:
                sizes.append(control_size(spec.control_sizing, rule, w, h))
            except ControlTooSmall as err:
                problems.append(f"control image {path.parent.name}/{path.name}: {err}")
        items.append(replace(it, control_sizes=tuple(sizes)))
    if problems:  # every such control at once (an image at several resolutions: named once)
        raise DatasetError(
            f"{scan.root}: control images too small for {spec.name}", list(dict.fromkeys(problems))
        )
    return replace(scan, items=items)


def control_resolution_problems(scan: DatasetScan, rule: ControlRule) -> list[FieldProblem]:
    """A control_resolution other than the default set for a dataset without control images
    (it would size nothing): refused naming the field, not ignored."""
    if rule == "pipeline" or scan.controls_per_image():
        return []
    return [
        FieldProblem(
            "control_resolution",
            f"the dataset has no control images to size ({rule!r}): leave it at 'pipeline'",
        )
    ]
