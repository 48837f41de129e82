"""BucketBatchSampler: one bucket per batch, full coverage, determinism, exact resume."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from lorastudio.data import BucketBatchSampler
from lorastudio.errors import ConfigError, DatasetError


def _buckets(n: int = 23, seed: int = 0) -> list[tuple[int, int]]:
    shapes = [(64, 64), (96, 48), (48, 96), (80, 48)]
    rng = np.random.default_rng(seed)
    return [shapes[i] for i in rng.integers(0, len(shapes), size=n)]


def _take(sampler: BucketBatchSampler, count: int) -> list[list[int]]:
    """The next `count` batches, crossing epoch boundaries like a step-based training loop."""
    out: list[list[int]] = []
    while len(out) < count:
        for batch in sampler:
            out.append(batch)
            if len(out) == count:
                break
    return out


@pytest.mark.parametrize("batch_size", [1, 3, 4, 50])
def test_every_batch_one_bucket_and_every_index_once(batch_size):
    buckets = _buckets()
    sampler = BucketBatchSampler(buckets, batch_size=batch_size, seed=7)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert len(batches) == len(sampler)
        assert sorted(itertools.chain.from_iterable(batches)) == list(range(len(buckets)))
        for batch in batches:
            assert 1 <= len(batch) <= batch_size
            assert len({buckets[i] for i in batch}) == 1


def test_len_counts_tails_and_drop_last_drops_them():
    buckets = [(64, 64)] * 5 + [(96, 48)] * 3
    assert len(BucketBatchSampler(buckets, batch_size=2, seed=0)) == 3 + 2
    dropping = BucketBatchSampler(buckets, batch_size=2, seed=0, drop_last=True)
    assert len(dropping) == 2 + 1
    batches = list(dropping)
    assert len(batches) == 3 and all(len(b) == 2 for b in batches)


def test_drop_last_with_no_full_batch_refused():
    with pytest.raises(DatasetError, match="batch"):
        BucketBatchSampler([(64, 64), (96, 48)], batch_size=2, seed=0, drop_last=True)
    with pytest.raises(ConfigError):
        BucketBatchSampler([(64, 64)], batch_size=0, seed=0)


def test_order_is_a_function_of_seed_and_epoch():
    buckets = _buckets(40)
    a = BucketBatchSampler(buckets, batch_size=3, seed=1)
    b = BucketBatchSampler(buckets, batch_size=3, seed=1)
    c = BucketBatchSampler(buckets, batch_size=3, seed=2)
    assert a.epoch_batches(0) == b.epoch_batches(0)
    assert a.epoch_batches(0) != c.epoch_batches(0)
    assert a.epoch_batches(0) != a.epoch_batches(1)
    b.set_epoch(5)
    assert list(b) == a.epoch_batches(5)


def test_iteration_rolls_into_the_next_epoch():
    sampler = BucketBatchSampler(_buckets(), batch_size=4, seed=3)
    first, second = list(sampler), list(sampler)
    assert first == sampler.epoch_batches(0) and second == sampler.epoch_batches(1)
    assert sampler.epoch == 2


@pytest.mark.parametrize("stop_after", [0, 1, 4, 7, 8, 13])
def test_state_dict_resume_continues_the_same_sequence(stop_after):
    buckets = _buckets(30)
    reference = _take(BucketBatchSampler(buckets, batch_size=4, seed=11), 20)

    first = BucketBatchSampler(buckets, batch_size=4, seed=11)
    head = _take(first, stop_after)
    state = first.state_dict()

    resumed = BucketBatchSampler(buckets, batch_size=4, seed=11)
    resumed.load_state_dict(dict(state))
    resumed.set_epoch(state["epoch"])  # what a loop does at the top of an epoch: must keep position
    assert head + _take(resumed, 20 - stop_after) == reference


def test_state_at_epoch_end_points_to_next_epoch():
    sampler = BucketBatchSampler([(64, 64)] * 4, batch_size=2, seed=0)
    it = iter(sampler)
    next(it), next(it)  # both batches of epoch 0 taken, iterator not yet exhausted
    assert sampler.state_dict() == {"epoch": 1, "position": 0}
    assert list(sampler) == sampler.epoch_batches(1)


def test_bad_state_refused():
    sampler = BucketBatchSampler([(64, 64)] * 4, batch_size=2, seed=0)
    with pytest.raises(ConfigError):
        sampler.load_state_dict({"epoch": 0})
    with pytest.raises(ConfigError):
        sampler.load_state_dict({"epoch": 0, "position": 3})
