"""The weighted mix of dataset entries (data/mix.py) through the bucket sampler: over an epoch
each entry and image is used exactly as its repeats / weight say, the epoch length is fixed,
the order is a function of (seed, epoch), and a saved position resumes the same sequence."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

from lorastudio.data import BucketBatchSampler
from lorastudio.data.mix import EpochMix, MixEntry, apportion, entry_counts

SHAPES = [(64, 64), (96, 48)]


def _entry(**kw: object) -> MixEntry:
    return MixEntry(label="e", root=Path("/nowhere"), **kw)  # type: ignore[arg-type]


def _items(sizes: list[int]) -> tuple[list[int], list[tuple[int, int]]]:
    """Item entries and buckets: entry e has sizes[e] items, alternating between two buckets."""
    entries = [e for e, n in enumerate(sizes) for _ in range(n)]
    buckets = [SHAPES[i % 2] for i in range(len(entries))]
    return entries, buckets


def _sampler(
    sizes: list[int], entries: list[MixEntry], batch_size: int = 2, seed: int = 3
) -> BucketBatchSampler:
    item_entries, buckets = _items(sizes)
    return BucketBatchSampler(buckets, batch_size, seed, mix=EpochMix(item_entries, buckets, entries))


def test_apportion_is_exact_and_proportional() -> None:
    assert apportion(10, [1, 1, 1]) == [4, 3, 3]  # the tie goes to the earlier entry
    assert apportion(8, [3, 1]) == [6, 2]
    assert sum(apportion(1001, [0.3, 2.7, 1.1, 5])) == 1001
    assert apportion(5, [1, 0]) == [5, 0]


def test_repeats_use_every_image_exactly_n_times_per_epoch() -> None:
    sizes = [3, 5]
    sampler = _sampler(sizes, [_entry(repeats=4), _entry(repeats=1)])
    item_entries, buckets = _items(sizes)
    assert len(sampler) == sum(
        -(-n // 2)
        for n in EpochMix(item_entries, buckets, [_entry(repeats=4), _entry()]).bucket_counts().values()
    )
    for epoch in range(3):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert len(batches) == len(sampler)
        uses = Counter(itertools.chain.from_iterable(batches))
        assert {i: uses[i] for i in range(8)} == {0: 4, 1: 4, 2: 4, 3: 1, 4: 1, 5: 1, 6: 1, 7: 1}
        assert all(len({buckets[i] for i in batch}) == 1 for batch in batches)


def test_weights_give_each_entry_its_exact_share_every_epoch() -> None:
    sizes = [2, 6, 4]  # N = 12 samples per epoch
    entries = [_entry(weight=3.0), _entry(weight=1.0), _entry(weight=2.0)]
    assert entry_counts(entries, sizes) == [6, 2, 4]
    sampler = _sampler(sizes, entries, batch_size=3)
    item_entries, _ = _items(sizes)
    chosen = []
    lengths = set()
    for epoch in range(6):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        lengths.add(len(batches))
        uses = Counter(itertools.chain.from_iterable(batches))
        per_entry = Counter()
        for index, n in uses.items():
            per_entry[item_entries[index]] += n
        assert per_entry == {0: 6, 1: 2, 2: 4}
        assert uses[0] == uses[1] == 3  # entry 0: 6 samples over 2 images, 3 each
        assert all(uses[i] == 1 for i in range(8, 12))  # entry 2: weight 2 on 4 images of 12 -> once each
        assert sum(uses[i] for i in range(2, 8)) == 2 and all(uses[i] <= 1 for i in range(2, 8))
        chosen.append(tuple(sorted(i for i in range(2, 8) if uses[i])))
    assert lengths == {len(sampler)}  # a fixed epoch length: steps per epoch are known up front
    assert len(set(chosen)) > 1  # the down-weighted entry shows other images in other epochs


def test_mix_order_is_a_function_of_seed_and_epoch_and_resumes_exactly() -> None:
    sizes, entries = [3, 5], [_entry(weight=2.0), _entry(weight=1.0)]
    a, b = _sampler(sizes, entries), _sampler(sizes, entries)
    assert a.epoch_batches(1) == b.epoch_batches(1)
    assert a.epoch_batches(1) != _sampler(sizes, entries, seed=4).epoch_batches(1)
    full = [batch for _ in range(3) for batch in a]  # three whole epochs
    resumed = _sampler(sizes, entries)
    head = []
    for batch in resumed:
        head.append(batch)
        if len(head) == 5:
            break
    state = resumed.state_dict()
    fresh = _sampler(sizes, entries)
    fresh.load_state_dict(state)
    tail = []
    while len(head) + len(tail) < len(full):
        tail += list(fresh)
    assert head + tail[: len(full) - len(head)] == full


def test_plain_entries_sample_like_no_mix() -> None:
    """Every entry used once: the mix gives the same batches as the plain sampler."""
    item_entries, buckets = _items([4, 3])
    mixed = BucketBatchSampler(
        buckets, 2, 5, mix=EpochMix(item_entries, buckets, [_entry(), _entry(repeats=1)])
    )
    plain = BucketBatchSampler(buckets, 2, 5)
    assert [sorted(map(sorted, mixed.epoch_batches(e))) for e in range(3)] == [
        sorted(map(sorted, plain.epoch_batches(e))) for e in range(3)
    ]
