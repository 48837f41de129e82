"""What a data-parallel launch refuses and how it cuts a batch (no processes launched): num_gpus
> 1 started as one process, a batch_size that does not divide by the ranks, lora_dropout with
several ranks; every rank's contiguous slice of a global batch."""

from __future__ import annotations

import pytest

from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings
from lorastudio.training.distributed import ParallelContext, check_parallel_config
from lorastudio.training.loop import train


def test_num_gpus_without_a_launch_is_refused(make_config, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    events: list = []
    with pytest.raises(ConfigError) as caught:
        train(make_config(num_gpus=2), events.append, device="cpu")
    message = str(caught.value)
    assert "num_gpus=2" in message and "single process" in message
    assert "torchrun" in message and "--gpus 2" in message
    assert [e.type for e in events] == ["error"]
    outputs = get_settings().outputs_dir
    assert not outputs.exists() or not any(outputs.iterdir())  # nothing written


def test_a_batch_that_does_not_divide_by_the_world_is_refused(make_config):
    ctx = ParallelContext(rank=1, world_size=2, local_rank=1)
    with pytest.raises(ConfigError, match="batch_size") as caught:
        check_parallel_config(make_config(batch_size=3, num_gpus=2), ctx)
    assert "num_gpus" not in str(caught.value)  # num_gpus matches the launch
    with pytest.raises(ConfigError, match="launched with 2 processes"):
        check_parallel_config(make_config(batch_size=2, num_gpus=4), ctx)
    check_parallel_config(make_config(batch_size=2, num_gpus=2), ctx)  # accepted


def test_each_rank_takes_a_contiguous_slice_covering_the_batch():
    for world in (1, 2, 3, 4):
        for size in range(1, 9):
            slices = [ParallelContext(r, world, r).shard(size) for r in range(world)]
            covered = [i for s in slices for i in range(s.start, s.stop)]
            assert covered == list(range(size))
            assert all(s.grad_factor == world and s.size == size for s in slices)


def test_lora_dropout_with_several_ranks_is_refused(make_config):
    ctx = ParallelContext(rank=0, world_size=2, local_rank=0)
    with pytest.raises(ConfigError, match="lora_dropout") as caught:
        check_parallel_config(make_config(batch_size=2, num_gpus=2, lora_dropout=0.1), ctx)
    assert "same dropout masks" in str(caught.value)
    check_parallel_config(make_config(batch_size=2, lora_dropout=0.1), ParallelContext())  # one process
