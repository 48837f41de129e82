"""The validation hold-out of a run (TrainConfig.validation_split): which images are kept out of
training to measure the validation loss on (training/validate.py). No torch.

- a fraction f of the scanned dataset: max(1, round(f x N)) images chosen by the run's seed
  (numpy's Generator over [seed, HOLDOUT_STREAM]: the same images for the same seed and dataset,
  whatever else the config says); the others train, in their scan order;
- a folder (absolute, or a name under datasets/): every image of that folder, scanned like the
  dataset; the whole dataset trains. It must not be the dataset folder itself.

The training scan keeps the fingerprint of the whole dataset folder: the split is a function of
the config (validation_split, seed), which is part of the run's identity.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from lorastudio.data.items import DatasetScan, ImageItem
from lorastudio.errors import ConfigError, DatasetError, FieldProblem

HOLDOUT_STREAM = 29  # the seed stream of the hold-out draw (independent of every training stream)
FIELD = "validation_split"


@dataclass(frozen=True)
class Holdout:
    """A dataset split for validation: `train` (the scan the run trains on) and `validation` (the
    held-out items, sorted by file name); `source` says where they came from, for the preflight."""

    train: DatasetScan
    validation: tuple[ImageItem, ...]
    source: str

    def names(self) -> list[str]:
        """The held-out images' file names."""
        return [item.path.name for item in self.validation]


def held_out_indices(count: int, fraction: float, seed: int) -> list[int]:
    """Indices (ascending) of the `count` scanned items held out for `fraction` with `seed`.
    Raises ConfigError (validation_split) when nothing would be left to train on."""
    held = max(1, round(fraction * count))
    if held >= count:
        raise ConfigError(
            [
                FieldProblem(
                    FIELD,
                    f"holding out {held} of {count} image(s) leaves no training image; "
                    "use a smaller fraction, more images or a validation folder",
                )
            ]
        )
    rng = np.random.default_rng([int(seed), HOLDOUT_STREAM])
    return sorted(int(i) for i in rng.choice(count, size=held, replace=False))


def split_validation(
    scan: DatasetScan,
    split: float | str | None,
    seed: int,
    *,
    resolve_folder: Callable[[str], Path],
    scan_folder: Callable[[Path], DatasetScan],
) -> Holdout:
    """Split `scan` for `split` (see the module docstring). `resolve_folder` turns a folder
    setting into a checked path (data.resolve_dataset_dir with the caller's root rules), and
    `scan_folder` scans it with the run's dataset settings. Returns a Holdout (no validation
    items when split is None). Raises ConfigError (field validation_split) naming the problem: a
    fraction that leaves no training image, the dataset folder itself, a folder that cannot be
    used (its DatasetError problems)."""
    if split is None:
        return Holdout(scan, (), "none")
    if isinstance(split, float | int):
        picked = set(held_out_indices(len(scan.items), float(split), seed))
        train = [it for i, it in enumerate(scan.items) if i not in picked]
        held = tuple(it for i, it in enumerate(scan.items) if i in picked)
        source = f"{len(held)} of {len(scan.items)} images of {scan.root} (fraction {split:g}, seed {seed})"
        return Holdout(replace(scan, items=train), held, source)
    folder = resolve_folder(split)
    if folder.resolve() == Path(scan.root).resolve():
        raise ConfigError(
            [FieldProblem(FIELD, f"{folder} is the dataset itself: its images would be trained on")]
        )
    try:
        other = scan_folder(folder)
    except DatasetError as err:
        raise ConfigError(
            [FieldProblem(FIELD, f"validation folder {folder}: {p}") for p in (err.problems or [str(err)])]
        ) from None
    return Holdout(scan, tuple(other.items), f"every image of {folder}")


def validation_section(holdout: Holdout, validate_every: int | None) -> dict[str, object] | None:
    """The preflight report's validation section (None without a hold-out): the images held
    out (count, names), where they came from and how often the loss is measured."""
    if not holdout.validation:
        return None
    return {
        "held_out": len(holdout.validation),
        "images": holdout.names(),
        "source": holdout.source,
        "train_images": len(holdout.train.items),
        "every": validate_every,
    }
