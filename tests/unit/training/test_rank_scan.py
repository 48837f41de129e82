"""training/rank_scan.prepare_on_ranks on a real c10d store, two threads standing in for the ranks
of a launch (the store is what the ranks share; the processes of a launch are
tests/unit/training/test_ddp_stop.py's): a launch's second train() waits for rank 0's own
outcome of its second preflight, not the first one's (RELIABILITY 390), and a rank never goes on after
rank 0's preflight failed (RELIABILITY 392)."""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable

import pytest
import torch.distributed as dist

from lorastudio.errors import TrainingStopped
from lorastudio.training import rank_scan
from lorastudio.training.distributed import ParallelContext

WORLD = 2
WAIT_S = 60.0  # a bound only for a broken run (a thread never returning): the test waits on events


@pytest.fixture
def shared_store(monkeypatch: pytest.MonkeyPatch) -> dist.Store:
    """One in-memory c10d store as the 'default store' of every thread, the calls counted anew."""
    store = dist.HashStore()
    monkeypatch.setattr(dist.distributed_c10d, "_get_default_store", lambda: store)
    monkeypatch.setattr(rank_scan, "_CALLS", collections.Counter())
    return store


def _run_ranks(body: Callable[[int], None]) -> None:
    threads = [threading.Thread(target=body, args=(rank,), daemon=True) for rank in range(WORLD)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    assert not any(t.is_alive() for t in threads), "a rank is still waiting"


@pytest.mark.parametrize("save", [False, True])
def test_a_second_preflight_follows_rank_0s_own_outcome_not_the_first_ones(shared_store, save):
    """Run 1 ends its preflight DONE; in run 2 rank 0 is stopped in its preflight once rank 1
    is waiting (or, on the old code, went on). Before: the keys were the same for both runs, so
    rank 1 read run 1's DONE at once and ran its own preflight and the run (both ranks decoding,
    as before fix 213; then a collective rank 0 never joins after its stop: a hang), and rank 0
    found run 1's acknowledgement and did not wait for rank 1's."""
    rank1_waits = threading.Event()  # rank 1 is in run 2's wait, or past it
    results: dict[tuple[int, int], object] = {}
    prepared: list[tuple[int, int]] = []

    def body(rank: int) -> None:
        ctx = ParallelContext(rank, WORLD, rank)
        for run in (1, 2):

            def prepare(progress: object, run: int = run) -> str:
                prepared.append((rank, run))
                if rank == 1 and run == 2:
                    rank1_waits.set()
                if rank == 0 and run == 2:
                    assert rank1_waits.wait(WAIT_S)
                    raise TrainingStopped(save)
                return f"prepared {run}"

            def beat(run: int = run) -> None:
                if rank == 1 and run == 2:
                    rank1_waits.set()

            try:
                results[rank, run] = rank_scan.prepare_on_ranks(ctx, prepare, lambda: None, beat)
            except TrainingStopped as stop:
                results[rank, run] = ("stopped", stop.save)

    _run_ranks(body)
    assert results == {
        (0, 1): "prepared 1",
        (1, 1): "prepared 1",
        (0, 2): ("stopped", save),
        (1, 2): ("stopped", save),  # not run 1's "done": rank 1 ends with rank 0
    }
    assert sorted(prepared) == [(0, 1), (0, 2), (1, 1)]  # rank 1 never prepared run 2


def test_a_rank_whose_preflight_passes_where_rank_0s_failed_does_not_go_on(shared_store):
    """Rank 0's preflight fails with an error of its own (its event sink, a read that failed
    once); rank 1's finds nothing wrong. Before (RELIABILITY 392): rank 1 went on to load the
    models and waited for rank 0 in the group's first collective (under torchrun until the agent
    stopped it; in a launch without one for COLLECTIVE_TIMEOUT, a day)."""
    outcomes: dict[int, object] = {}

    def body(rank: int) -> None:
        def prepare(progress: object) -> str:
            if rank == 0:
                raise OSError("the decode record could not be written")
            return "prepared"

        try:
            outcomes[rank] = rank_scan.prepare_on_ranks(
                ParallelContext(rank, WORLD, rank), prepare, lambda: None, None
            )
        except (OSError, rank_scan.RankPreflightFailed) as err:
            outcomes[rank] = f"{type(err).__name__}: {err}"

    _run_ranks(body)
    assert outcomes == {
        0: "OSError: the decode record could not be written",
        1: "RankPreflightFailed: rank 0's preflight failed (its error is the run's); rank 1 found nothing wrong",
    }
