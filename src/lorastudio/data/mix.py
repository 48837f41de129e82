"""The weighted mix of a run's dataset entries: how many samples each entry and image gives per
epoch, and the epoch's multiset of item indices (no torch, no HTTP).

Counting (config_datasets explains the settings):
- repeats mode (every entry without `weight`): an entry of n images with repeats r gives r x n
  samples per epoch, every image exactly r times;
- weight mode (every entry with `weight`): an epoch is N samples, N = the images of all entries;
  entry e gets its share of N (largest-remainder rounding of N x w_e / sum w, ties to the
  earlier entry).
Within an entry the count is split over its aspect buckets in proportion to their images (same
rounding), and within one (entry, bucket) group of k images a count c gives every image
floor(c / k) uses plus c mod k images drawn without replacement, anew each epoch, from a
generator seeded by (seed, epoch, group): the per-bucket totals, hence batches and steps per
epoch, are the same every epoch, and an epoch is a pure function of (seed, epoch).

Hand-written: the multiset with exact per-epoch counts and fixed bucket totals (which keep the
bucket sampler's epoch length fixed and resume exact) is not what torch's WeightedRandomSampler
(independent draws) does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

_GROUP_STREAM = 29  # keeps the mix's draws apart from the sampler's own (seed, epoch) stream


@dataclass(frozen=True)
class MixEntry:
    """One dataset entry of a run, resolved: where it is and the settings its images get.

    label: how reports name it (the path as configured; a kohya sub-folder as "parent/N_words");
    repeats / weight: the sampling (config_datasets; repeats None with weight None means 1);
    resolutions: the training side(s) of its images (each image is used at each);
    regularisation: class images (loss_weight then includes the run's prior_loss_weight);
    images / fingerprint: filled by the scan."""

    label: str
    root: Path
    repeats: int | None = None
    weight: float | None = None
    loss_weight: float = 1.0
    caption_dropout: float = 0.0
    trigger_word: str | None = None
    default_caption: str | None = None
    resolutions: tuple[int, ...] = ()
    shuffle_tags: bool = False
    keep_tokens: int = 0
    tag_dropout: float = 0.0
    regularisation: bool = False
    prior_prediction: bool = False  # its samples' target: the base model's prediction
    # a kohya N_words sub-folder (TrainConfig.kohya_folders): its captions are read by kohya's rule
    # (data/kohya_captions.py); not a sampling setting: what it changes shows in the fingerprint
    kohya: bool = False
    images: int = 0
    fingerprint: str = ""
    # the `[[datasets]]` entry it comes from (a kohya sub-folder: its parent's; None: data_dir or
    # a validation folder), for naming its problems' field; not a setting: never compared
    config_index: int | None = field(default=None, compare=False)

    def settings(self) -> dict[str, object]:
        """What the entry's samples get, JSON-able (its label and folder left out)."""
        return {
            "repeats": self.repeats,
            "weight": self.weight,
            "loss_weight": self.loss_weight,
            "caption_dropout": self.caption_dropout,
            "resolution": list(self.resolutions),
            "shuffle_tags": self.shuffle_tags,
            "keep_tokens": self.keep_tokens,
            "tag_dropout": self.tag_dropout,
        } | {k: True for k in ("regularisation", "prior_prediction") if getattr(self, k)}  # unset: as before


def apportion(total: int, weights: Sequence[float]) -> list[int]:
    """Split `total` in proportion to `weights` (each >= 0, sum > 0) into integers summing to
    `total`: the floors of the quotas, then +1 by largest remainder (ties: the earlier index)."""
    whole = float(sum(weights))
    quotas = [total * w / whole for w in weights]
    counts = [math.floor(q) for q in quotas]
    order = sorted(range(len(weights)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


def entry_counts(entries: Sequence[MixEntry], images: Sequence[int]) -> list[int]:
    """Samples per epoch of each entry (`images`: how many items each entry has)."""
    if entries and all(e.weight is not None for e in entries):
        return apportion(sum(images), [float(e.weight or 0.0) for e in entries])
    return [(e.repeats or 1) * n for e, n in zip(entries, images, strict=True)]


def is_plain(entries: Sequence[MixEntry]) -> bool:
    """True when every item is used exactly once per epoch (no repeats above 1, no weights):
    the sampler then needs no mix."""
    return all(e.weight is None and (e.repeats or 1) == 1 for e in entries)


class EpochMix:
    """The item indices of each epoch, per bucket, with the counts of the module docstring.

    Takes each item's entry index and bucket (width, height, or any longer key a batch must
    share, e.g. DatasetScan.batch_keys), and the entries."""

    def __init__(
        self,
        item_entries: Sequence[int],
        item_buckets: Sequence[tuple[int, ...]],
        entries: Sequence[MixEntry],
    ):
        per_entry: dict[int, dict[tuple[int, ...], list[int]]] = {}
        for index, (entry, bucket) in enumerate(zip(item_entries, item_buckets, strict=True)):
            per_entry.setdefault(entry, {}).setdefault(tuple(int(v) for v in bucket), []).append(index)
        sizes = [sum(len(m) for m in per_entry.get(e, {}).values()) for e in range(len(entries))]
        counts = entry_counts(entries, sizes)
        # groups: (bucket, members, target count), in (entry, bucket) order
        self.groups: list[tuple[tuple[int, ...], np.ndarray, int]] = []
        for e in range(len(entries)):
            buckets = sorted(per_entry.get(e, {}))
            if not buckets:
                continue
            members = [per_entry[e][b] for b in buckets]
            for bucket, m, c in zip(
                buckets, members, apportion(counts[e], [len(m) for m in members]), strict=True
            ):
                self.groups.append((bucket, np.asarray(m, dtype=np.int64), c))
        self.entry_samples = counts

    def bucket_counts(self) -> dict[tuple[int, ...], int]:
        """Samples per bucket in every epoch."""
        totals: dict[tuple[int, ...], int] = {}
        for bucket, _, count in self.groups:
            totals[bucket] = totals.get(bucket, 0) + count
        return totals

    def epoch_groups(self, seed: int, epoch: int) -> list[np.ndarray]:
        """The item indices of `epoch` per bucket (buckets sorted; an index may repeat), before
        the sampler shuffles them. A pure function of (seed, epoch)."""
        merged: dict[tuple[int, ...], list[np.ndarray]] = {}
        for g, (bucket, members, count) in enumerate(self.groups):
            copies, extra = divmod(count, len(members))
            chosen = [np.tile(members, copies)]
            if extra:
                rng = np.random.default_rng([seed, epoch, _GROUP_STREAM, g])
                chosen.append(np.sort(members[rng.choice(len(members), extra, replace=False)]))
            merged.setdefault(bucket, []).extend(chosen)
        return [np.concatenate(merged[b]) for b in sorted(merged) if sum(len(a) for a in merged[b])]
