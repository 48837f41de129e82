"""BucketBatchSampler: batches of item indices, each batch from one bucket, resumable."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from lorastudio.errors import ConfigError, DatasetError, FieldProblem


class BucketBatchSampler:
    """Yields lists of item indices; every batch comes from one bucket; order is a deterministic
    function of (seed, epoch).

    Per epoch: the indices of each bucket are shuffled and cut into batches of `batch_size`
    (an incomplete tail batch of a bucket is kept unless `drop_last`), then all batches are
    shuffled together. Without drop_last every index appears exactly once per epoch.

    Iterating yields the rest of the current epoch (from the saved position) and, once it is
    exhausted, moves to the next epoch, so `for batch in sampler` can simply be repeated.
    `set_epoch(e)` selects an epoch (keeping the position when e is the current epoch, so it can
    be called after `load_state_dict`). `state_dict()` is {"epoch", "position"}, position = the
    number of batches of that epoch already yielded; restoring it continues the same sequence.
    One iterator at a time: iterating advances the sampler's own state.
    """

    def __init__(
        self, buckets: Sequence[tuple[int, ...]], batch_size: int, seed: int, drop_last: bool = False
    ):
        """Takes the bucket of each item (index i -> buckets[i]: (width, height), or any longer
        tuple of ints a batch must share, e.g. DatasetScan.batch_keys' (width, height, controls)),
        the batch size, the seed.

        Raises: ConfigError for batch_size < 1 or no items; DatasetError when drop_last leaves
        no batch at all (no bucket holds batch_size images).
        """
        if batch_size < 1:
            raise ConfigError([FieldProblem("batch_size", f"must be >= 1 (got {batch_size})")])
        if len(buckets) == 0:
            raise ConfigError([FieldProblem("buckets", "the sampler needs at least one item")])
        self.batch_size = batch_size
        self.seed = seed
        self.drop_last = drop_last
        groups: dict[tuple[int, ...], list[int]] = {}
        for index, bucket in enumerate(buckets):
            groups.setdefault(tuple(int(v) for v in bucket), []).append(index)
        self._groups = [np.asarray(groups[key], dtype=np.int64) for key in sorted(groups)]
        self._len = sum(self._batches_in(len(g)) for g in self._groups)
        if self._len == 0:
            sizes = ", ".join(f"{_label(key)}: {len(groups[key])}" for key in sorted(groups))
            raise DatasetError(
                f"no batch of {batch_size} images fits in one bucket with drop_last",
                [f"images per bucket: {sizes}", "lower batch_size or turn drop_last off"],
            )
        self._epoch = 0
        self._position = 0

    def _batches_in(self, count: int) -> int:
        full, tail = divmod(count, self.batch_size)
        return full + (1 if tail and not self.drop_last else 0)

    def __len__(self) -> int:
        """Batches per epoch (the same every epoch)."""
        return self._len

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def position(self) -> int:
        """Batches of the current epoch already yielded."""
        return self._position

    def set_epoch(self, epoch: int) -> None:
        """Select `epoch`; the position resets to 0 unless `epoch` is already the current one."""
        if epoch < 0:
            raise ConfigError([FieldProblem("epoch", f"must be >= 0 (got {epoch})")])
        if epoch != self._epoch:
            self._epoch = epoch
            self._position = 0

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """Every batch of `epoch` in order (a pure function of seed, epoch and the buckets)."""
        rng = np.random.default_rng([self.seed, epoch])
        batches: list[list[int]] = []
        for group in self._groups:
            order = group[rng.permutation(len(group))]
            for start in range(0, len(order), self.batch_size):
                batch = order[start : start + self.batch_size]
                if len(batch) == self.batch_size or not self.drop_last:
                    batches.append([int(i) for i in batch])
        return [batches[i] for i in rng.permutation(len(batches))]

    def __iter__(self) -> Iterator[list[int]]:
        if self._position >= self._len:  # the last batch was taken but the epoch not closed
            self._epoch, self._position = self._epoch + 1, 0
        batches = self.epoch_batches(self._epoch)
        while self._position < len(batches):
            batch = batches[self._position]
            self._position += 1
            yield batch
        self._epoch += 1
        self._position = 0

    def state_dict(self) -> dict[str, int]:
        """{"epoch", "position"}; a finished epoch is saved as (next epoch, 0)."""
        if self._position >= self._len:
            return {"epoch": self._epoch + 1, "position": 0}
        return {"epoch": self._epoch, "position": self._position}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a `state_dict()`; the next iteration continues exactly where it stopped.

        Raises: ConfigError if the state is malformed or its position is past this epoch's end.
        """
        try:
            epoch, position = int(state["epoch"]), int(state["position"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(
                [FieldProblem("sampler_state", f"expected {{'epoch': int, 'position': int}}, got {state!r}")]
            ) from None
        if epoch < 0 or not 0 <= position <= self._len:
            raise ConfigError(
                [
                    FieldProblem(
                        "sampler_state", f"epoch {epoch}, position {position} out of range (0..{self._len})"
                    )
                ]
            )
        if position == self._len:
            epoch, position = epoch + 1, 0
        self._epoch, self._position = epoch, position


def _label(key: tuple[int, ...]) -> str:
    """A group's name in messages: "WxH", plus " with N controls" for a paired group."""
    name = f"{key[0]}x{key[1]}"
    return name if len(key) < 3 else f"{name} with {key[2]} controls"
