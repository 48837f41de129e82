"""The ranks of a data-parallel run wait for rank 0 as long as its work alone takes: a sample
round (rank 0 renders, the others wait in the next stop poll's broadcast), a checkpoint, a LoRA
snapshot have no bound. torch's default collective timeout (NCCL: 10 minutes) would end a run
whose sample round of a large model takes longer; the job service's own hang watch and stop
requests bound that work instead (RELIABILITY, known limits).

Two gloo processes with torch's default timeout shrunk to 1 s: rank 0 works alone for 3 s before
the broadcast the other rank waits in, as a long sample round does. The processes are started as
the job service's workers are in the tests (processes.spawn_context: forked from the test
process's zygote, tests/zygote.py, which has imported torch; not two fresh interpreters)."""

from __future__ import annotations

import os
import socket
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from lorastudio.processes import spawn_context
from lorastudio.training.distributed import COLLECTIVE_TIMEOUT, ParallelContext, end_group, start_group

ALONE_S = 3.0


def _rank(rank: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    distributed_c10d.default_pg_timeout = timedelta(seconds=1)  # torch's default, scaled down
    ctx = start_group(ParallelContext(rank=rank, world_size=2, local_rank=rank), torch.device("cpu"))
    flag = torch.zeros(1)
    try:
        if rank == 0:
            time.sleep(ALONE_S)  # a sample round
            flag += 7
        dist.broadcast(flag, src=0)  # the stop poll every rank agrees on
        Path(out, f"rank{rank}").write_text(str(int(flag.item())), encoding="utf-8")
    except RuntimeError as err:
        Path(out, f"rank{rank}").write_text(f"error: {err}", encoding="utf-8")
    finally:
        end_group(ctx)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_other_ranks_wait_out_rank_0s_long_work_alone(tmp_path: Path) -> None:
    assert timedelta(hours=1) <= COLLECTIVE_TIMEOUT  # longer than any sample round
    spawn = spawn_context()
    port = _free_port()
    ranks = [spawn.Process(target=_rank, args=(r, port, str(tmp_path))) for r in (0, 1)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(60)
    results = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert results == {"rank0": "7", "rank1": "7"}, results
