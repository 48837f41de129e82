"""Step arithmetic: epochs -> optimizer steps, with and without aspect buckets."""

from __future__ import annotations

import math

import pytest

from lorastudio.config import TrainConfig
from lorastudio.data import BucketBatchSampler
from lorastudio.training.optim import group_micro_batches, iter_optimizer_steps, steps_per_epoch, total_steps


def _cfg(**kw: object) -> TrainConfig:
    return TrainConfig(family="flux", base_model="a/b", data_dir="d", **kw)


@pytest.mark.parametrize("n_images", [1, 3, 8, 13])
@pytest.mark.parametrize("batch", [1, 2, 4])
@pytest.mark.parametrize("accum", [1, 2, 3])
def test_one_bucket_epochs_give_epochs_times_ceil_n_over_batch_times_accum(n_images, batch, accum):
    sampler = BucketBatchSampler([(32, 32)] * n_images, batch, seed=0)
    cfg = _cfg(num_epochs=3, batch_size=batch, grad_accum=accum, steps=7)
    assert total_steps(cfg, len(sampler)) == 3 * math.ceil(n_images / (batch * accum))


def test_with_buckets_steps_per_epoch_is_ceil_of_batches_over_accum():
    buckets = [(32, 32)] * 5 + [(48, 16)] * 3 + [(16, 48)]
    sampler = BucketBatchSampler(buckets, 2, seed=0)
    batches = sampler.epoch_batches(0)
    assert len(sampler) == len(batches) == 3 + 2 + 1  # every bucket's tail batch is kept
    groups = list(group_micro_batches(batches, 4))
    assert len(groups) == steps_per_epoch(len(sampler), 4) == math.ceil(len(batches) / 4)
    assert [b for g in groups for b in g] == batches  # every batch once, in order
    assert total_steps(_cfg(num_epochs=2, grad_accum=4, batch_size=2), len(sampler)) == 2 * len(groups)


def test_steps_are_used_when_num_epochs_is_zero():
    assert total_steps(_cfg(steps=17, num_epochs=0), 5) == 17


def test_steps_mode_accumulates_across_epochs_and_epoch_mode_does_not():
    sampler = BucketBatchSampler([(32, 32)] * 3, 1, seed=0)  # 3 batches per epoch
    streamed = iter_optimizer_steps(sampler.epoch_batches, 2, by_epoch=False)
    firsts = [next(streamed) for _ in range(3)]
    assert all(len(group) == 2 for _, group in firsts)  # always grad_accum micro-batches
    assert [epoch for epoch, _ in firsts] == [0, 1, 1]  # the second step spans epochs 0 and 1
    flat = [b for _, g in firsts for b in g]
    assert flat == sampler.epoch_batches(0) + sampler.epoch_batches(1)
    by_epoch = iter_optimizer_steps(sampler.epoch_batches, 2, by_epoch=True)
    sizes = [len(next(by_epoch)[1]) for _ in range(4)]
    assert sizes == [2, 1, 2, 1]  # each epoch ends with a short step
