"""The validation hold-out of a run (TrainConfig.validation_split): which images are kept out of
training to measure the validation loss on (training/validate.py). No torch.

- a fraction f of the scanned dataset, per dataset entry (data/entries.py): max(1, round(f x N))
  of the entry's N images (none of an entry that would be left without an image, when others
  are held from; refused when no entry can give any; none of a regularisation entry: its class
  images are no part of what the validation loss measures, the subject, and all of them train,
  as kohya's sd-scripts keeps its reg images out of the validation split) chosen by the run's seed (numpy's Generator over [seed, HOLDOUT_STREAM]
  and, for entry e > 0, e: the same images for the same seed and dataset, whatever else the
  config says); a held image goes with all its copies at the run's other resolutions; the others
  train, in their scan order;
- a folder (absolute, or a name under datasets/): every image of that folder, scanned like the
  dataset; the whole dataset trains. It must not be one of the dataset folders.

The training scan keeps the fingerprint of the whole dataset folder: the split is a function of
the config (validation_split, seed), which is part of the run's identity.

Overlap: a held-out image whose content (sha256 of its bytes, data.scan.file_sha256: the hash the
dataset fingerprint takes, whatever the file is named) is also a training image measures nothing
held out. When every held-out image is one, the split is refused (a copy of the dataset given as
the validation folder, or a dataset of duplicates); when some are, `Holdout.overlap` names them
and the preflight warns (`overlap_warning`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from lorastudio.data.items import DatasetScan, ImageItem, item_name
from lorastudio.errors import ConfigError, DatasetError, FieldProblem

HOLDOUT_STREAM = 29  # the seed stream of the hold-out draw (independent of every training stream)
FIELD = "validation_split"


@dataclass(frozen=True)
class Holdout:
    """A dataset split for validation: `train` (the scan the run trains on) and `validation` (the
    held-out items, sorted by file name); `source` says where they came from, for the preflight;
    `labels`: the dataset entries' labels when the items come from several entries (their names
    are then "label/file": two entries may hold files of the same name)."""

    train: DatasetScan
    validation: tuple[ImageItem, ...]
    source: str
    labels: tuple[str, ...] = ()
    # (held-out image, the training image of the same content), named as in the reports
    overlap: tuple[tuple[str, str], ...] = ()

    def names(self) -> list[str]:
        """The held-out images, one per (entry, file) (an image held at several resolutions:
        once), named by data.items.item_name (prefixed by the entry's label with several entries)."""
        return list(dict.fromkeys(item_name(item, self.labels) for item in self.validation))


def held_out_indices(count: int, fraction: float, seed: int, stream: int = 0) -> list[int]:
    """Indices (ascending) of the `count` scanned items held out for `fraction` with `seed`
    (`stream` > 0: a dataset entry's own draw). Raises ConfigError (validation_split) when
    nothing would be left to train on."""
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
    rng = np.random.default_rng([int(seed), HOLDOUT_STREAM, *([stream] if stream else [])])
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
        return _checked(_split_fraction(scan, float(split), seed), f"the held-out {split:g} of the dataset")
    folder = resolve_folder(split)
    roots = [Path(e.root).resolve() for e in scan.entries] or [Path(scan.root).resolve()]
    if folder.resolve() in roots:
        raise ConfigError(
            [FieldProblem(FIELD, f"{folder} is the dataset itself: its images would be trained on")]
        )
    try:
        other = scan_folder(folder)
    except DatasetError as err:
        raise ConfigError(
            [FieldProblem(FIELD, f"validation folder {folder}: {p}") for p in (err.problems or [str(err)])]
        ) from None
    bare = [it.path.name for it in other.items if not it.controls]
    if bare and all(it.controls for it in scan.items):  # an edit run measured on text-to-image samples
        listed = ", ".join(bare[:5]) + (" ..." if len(bare) > 5 else "")
        raise ConfigError(
            [
                FieldProblem(
                    FIELD,
                    f"validation folder {folder}: {len(bare)} image(s) without a control image ({listed}) "
                    "while every training image edits its controls: their loss would measure text-to-image "
                    "generation; give them controls (its control/ sub-folder, a control_files row)",
                )
            ]
        )
    return _checked(
        Holdout(scan, tuple(other.items), f"every image of {folder}"), f"validation folder {folder}"
    )


def _checked(holdout: Holdout, what: str) -> Holdout:
    """`holdout` with its `overlap` (held-out images of the same content as a training image)
    filled. Raises ConfigError when every held-out image is a training image too."""
    from lorastudio.data.scan import file_sha256

    train_labels = holdout.train.labels()
    try:
        trained = {
            file_sha256(it.path, it.folder_id): item_name(it, train_labels) for it in holdout.train.images()
        }
        held = {
            item_name(it, holdout.labels): file_sha256(it.path, it.folder_id)
            for it in holdout.validation  # an image held at several resolutions: once (by name)
        }
    except DatasetError as err:
        raise ConfigError(
            [FieldProblem(FIELD, f"{what}: {p}") for p in (err.problems or [str(err)])]
        ) from None
    overlap = tuple((name, trained[digest]) for name, digest in held.items() if digest in trained)
    if held and len(overlap) == len(held):
        pairs = ", ".join(f"{v} = {t}" for v, t in overlap[:5]) + (" ..." if len(overlap) > 5 else "")
        raise ConfigError(
            [
                FieldProblem(
                    FIELD,
                    f"{what}: all {len(held)} validation image(s) are training images too (same content: "
                    f"{pairs}), so the validation loss would measure images the run trains on; hold out "
                    "images the run does not train on",
                )
            ]
        )
    return replace(holdout, overlap=overlap)


def overlap_warning(holdout: Holdout | None) -> str | None:
    """The preflight's warning naming the held-out images that are training images too (same
    content), or None when there are none."""
    if holdout is None or not holdout.overlap:
        return None
    pairs = ", ".join(f"{v} (= {t})" for v, t in holdout.overlap)
    return (
        f"{len(holdout.overlap)} of {len(holdout.names())} validation image(s) are also training images "
        f"(same content): {pairs}; their validation loss is not held out"
    )


def _split_fraction(scan: DatasetScan, fraction: float, seed: int) -> Holdout:
    """Hold out `fraction` of each dataset entry's images (held_out_indices per entry; entry e > 0
    draws from its own stream), every copy of a held image (one per resolution, data/
    resolutions.py) with it: no image trains at one resolution and validates at another. A
    regularisation entry holds none out (its class images all train), nor does an entry too
    small to split (of several); ConfigError when none can. The train
    scan's entries count the images they keep (MixEntry.images: the preflight's and sidecar's)."""
    per_entry: dict[int, list[Path]] = {}
    for item in scan.images():  # each (entry, file) once
        per_entry.setdefault(item.entry, []).append(item.path)
    regularisation = {i for i in per_entry if i < len(scan.entries) and scan.entries[i].regularisation}
    splittable = [e for e in per_entry if e not in regularisation]  # class images all train
    held_keys: set[tuple[int, Path]] = set()
    too_small: list[str] = []
    for entry, paths in sorted(per_entry.items()):
        if entry in regularisation:
            continue
        try:
            picked = held_out_indices(len(paths), fraction, seed, stream=entry)
        except ConfigError:
            if len(splittable) == 1:
                raise
            too_small.append(scan.entries[entry].label if entry < len(scan.entries) else str(entry))
            continue  # an entry too small to split trains whole (the source names it)
        held_keys |= {(entry, paths[i]) for i in picked}
    if not held_keys:
        raise ConfigError(
            [
                FieldProblem(
                    FIELD,
                    f"holding out {fraction:g} of each dataset entry leaves none of them an image to train "
                    "on; use a smaller fraction, more images or a validation folder",
                )
            ]
        )
    train = [it for it in scan.items if (it.entry, it.path) not in held_keys]
    held = tuple(it for it in scan.items if (it.entry, it.path) in held_keys)
    count = sum(len(p) for p in per_entry.values())
    where = scan.root if len(per_entry) == 1 else f"{len(per_entry)} dataset entries (each its fraction)"
    source = f"{len(held_keys)} of {count} images of {where} (fraction {fraction:g}, seed {seed})"
    if too_small:
        source += f"; none of {', '.join(too_small)} (too few images to split)"
    if regularisation:
        source += (
            f"; none of {', '.join(scan.entries[i].label for i in sorted(regularisation))} (regularisation)"
        )
    labels = scan.labels() if len(per_entry) > 1 else ()
    kept = Counter(entry for entry, _ in {(it.entry, it.path) for it in train})  # images each entry trains on
    entries = tuple(replace(e, images=kept[i]) for i, e in enumerate(scan.entries))
    return Holdout(replace(scan, items=train, entries=entries), held, source, labels)


def validation_section(holdout: Holdout, validate_every: int | None) -> dict[str, object] | None:
    """The preflight report's validation section (None without a hold-out): the images held
    out (count, names), where they came from and how often the loss is measured."""
    if not holdout.validation:
        return None
    return {
        "held_out": len(holdout.names()),
        "images": holdout.names(),
        "source": holdout.source,
        "train_images": len(holdout.train.images()),
        "every": validate_every,
    }
