"""Data-parallel training on the CPU: two gloo processes (launched like torchrun: RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT in the environment) train the same LoRA, within float
tolerance, as one process with the same global batch and seed; only rank 0 emits and writes.
A num_gpus > 1 run started as a single process is refused with a clear message."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

from lorastudio.config import TrainConfig
from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings
from lorastudio.training.distributed import ParallelContext, check_parallel_config
from lorastudio.training.events import StopRequest
from lorastudio.training.loop import train

WORLD = 2
# One process computes a batch of 2 in one forward; two compute one sample each, so the sums
# are rounded in another order: float32 noise, far below what a wrong shard or scale would give.
LOSS_RTOL = 1e-5
LORA_ATOL, LORA_RTOL = 1e-6, 1e-4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank_main(rank: int, cfg: TrainConfig, port: int, out: str, stop_after: int | None = None) -> None:
    """One launched process: the environment torchrun would set, then a plain train() call.
    With stop_after, EVERY rank's stop poll asks for stop-and-save once that many steps are
    done on rank 0 (rank 1 never sees progress events): only rank 0's poll may count."""
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(WORLD),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    get_settings.cache_clear()
    events: list = []
    polls = {"n": 0}

    def should_stop() -> StopRequest | None:
        polls["n"] += 1
        if stop_after is None:
            return None
        if rank != 0:
            return StopRequest(save=False)  # must never be asked: only rank 0 decides
        done = [e for e in events if e.type == "progress"]
        return StopRequest(save=True) if done and done[-1].step >= stop_after else None

    result = train(cfg, events.append, should_stop, device="cpu")
    record = {
        "losses": result.losses,
        "steps_run": result.steps_run,
        "lora_path": str(result.lora_path) if result.lora_path else None,
        "events": [e.type for e in events],
        "stopped": result.stopped,
        "polls": polls["n"],
    }
    Path(out, f"rank{rank}.json").write_text(json.dumps(record))


def test_two_gloo_processes_train_the_lora_of_one_process(make_config, tmp_path):
    # 3 square images + 1 other: batches of 2 and tail batches of 1 (one rank's slice is empty)
    single_cfg = make_config(steps=4, batch_size=2, output_name="single")
    single = train(single_cfg, [].append, device="cpu")

    ddp_cfg = make_config(steps=4, batch_size=2, output_name="ddp", num_gpus=WORLD)
    mp.spawn(_rank_main, args=(ddp_cfg, _free_port(), str(tmp_path)), nprocs=WORLD, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]

    for record in ranks:  # every rank ran the same steps and reports the all-reduced loss
        assert record["steps_run"] == 4
        assert record["losses"] == pytest.approx(single.losses, rel=LOSS_RTOL)
    assert ranks[0]["events"][-1] == "complete" and ranks[0]["events"].count("progress") == 4
    assert ranks[1]["events"] == [] and ranks[1]["lora_path"] is None  # rank 1 is silent

    assert single.lora_path is not None and ranks[0]["lora_path"] is not None
    expected = load_file(str(single.lora_path))
    got = load_file(ranks[0]["lora_path"])
    assert sorted(got) == sorted(expected)
    moved = 0
    for key, tensor in expected.items():
        torch.testing.assert_close(got[key], tensor, atol=LORA_ATOL, rtol=LORA_RTOL, msg=key)
        moved += int(bool(tensor.abs().max() > 1e-3))
    assert moved > 0  # the LoRA trained (B moved away from its zero init)
    outputs = get_settings().outputs_dir
    assert sorted(p.name for p in outputs.iterdir()) == ["ddp", "single"]


def test_num_gpus_without_a_launch_is_refused(make_config, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    events: list = []
    with pytest.raises(ConfigError) as caught:
        train(make_config(num_gpus=2), events.append, device="cpu")
    message = str(caught.value)
    assert "num_gpus=2" in message and "single process" in message
    assert "torchrun" in message and "job service cannot launch" in message
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


def test_rank_0_stop_and_save_stops_every_rank_at_the_same_step(make_config, tmp_path):
    cfg = make_config(steps=6, batch_size=2, output_name="ddp", num_gpus=WORLD)
    mp.spawn(_rank_main, args=(cfg, _free_port(), str(tmp_path), 2), nprocs=WORLD, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]
    assert [r["steps_run"] for r in ranks] == [2, 2] and all(r["stopped"] for r in ranks)
    assert ranks[0]["losses"] == pytest.approx(ranks[1]["losses"], rel=1e-12)
    assert ranks[0]["polls"] > 0 and ranks[1]["polls"] == 0  # only rank 0 polls; rank 1's wish is ignored
    run_dir = get_settings().outputs_dir / "ddp"
    assert ranks[0]["lora_path"] == str(run_dir / "ddp.safetensors") and Path(ranks[0]["lora_path"]).is_file()
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-000002"]
