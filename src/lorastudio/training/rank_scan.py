"""A data-parallel run's preflight: rank 0 first, alone, with the decode progress and its stop.

The run's preflight decodes every image no check recorded (RELIABILITY 165, 166): minutes for a
large dataset copied in by hand. In a data-parallel run every rank used to scan alike (each
decoding every file) and none looked for a stop until the first agreed poll after the scan,
since a poll is a collective and a rank ending alone would leave the others waiting. Now
(RELIABILITY 213) the process group is started before the preflight (training/loop.py) and its
store (the key-value store every rank of the group reaches) carries rank 0's outcome:

- rank 0 runs the preflight with the run's DecodeProgress (its counts as events, its own stop
  check before each decode: rank 0 is the rank a stop is sent to, and the one `agree_stop`
  follows), then sets PREFLIGHT_KEY to DONE, FAILED, STOPPED or STOPPED_SAVE, whatever ended it;
- the other ranks wait for that key (polling the store, and their own stop check for its beat:
  jobs/rank_silence.py; their answer is not followed, as at every agreed poll), acknowledge it
  (rank 0 waits for every acknowledgement before it goes on: the store may be its own and go
  with its group), then: on a stop they end stopped too (nothing loaded); else they run their
  own preflight without progress, which finds what rank 0 decoded in the folders' records (a
  stat per file) and, after a failure, meets the same error as rank 0 (the files it could not
  decode are not recorded); one whose preflight passes where rank 0's failed (an error of rank
  0 alone: its event sink, a file read that failed once) fails too, RankPreflightFailed, rather
  than go on to wait for rank 0 in the group's first collective (RELIABILITY 392).

No collective is used, so no collective timeout bounds rank 0's scan. The keys are numbered by
the process's preflights (RELIABILITY 390): a second train() in the same launch (a script's
loop, the caller's group kept, or a new group on torchrun's agent store, whose key prefix
starts again at the same name) must not read the first one's outcome and acknowledgements.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import torch.distributed as dist

from lorastudio.errors import LorastudioError, TrainingStopped
from lorastudio.training.distributed import ParallelContext
from lorastudio.training.events import StopCheck

if TYPE_CHECKING:
    from lorastudio.data.decode_progress import DecodeProgress

T = TypeVar("T")


class RankPreflightFailed(LorastudioError):
    """Rank 0's preflight failed where this rank's passed (rank 0's error is the run's)."""


PREFLIGHT_KEY = "lorastudio/preflight"
ACK_KEY = "lorastudio/preflight-read"
DONE, FAILED, STOPPED, STOPPED_SAVE = b"done", b"failed", b"stopped", b"stopped-save"
POLL_S = 0.05  # how often a waiting rank looks at the store
# the preflights of each rank so far (one rank per process in a launch): every rank of a launch
# calls train() alike, so the n-th call of each rank is the same run, and its keys
# (PREFLIGHT_KEY/n, ACK_KEY/n) are that run's alone
_CALLS: collections.Counter[int] = collections.Counter()


def prepare_on_ranks(
    ctx: ParallelContext,
    prepare: Callable[[DecodeProgress | None], T],
    progress: Callable[[], DecodeProgress],
    should_stop: StopCheck | None,
) -> T:
    """`prepare` (the run's preflight, given its decode progress or None) run on this process as
    the module docstring says: at once with `progress()` on a single process or rank 0 (which
    then tells the others), after rank 0 without progress on the others. Needs the process group
    started for a distributed `ctx`. Raises what `prepare` raises; TrainingStopped on every rank
    when rank 0's preflight was stopped; RankPreflightFailed on another rank whose preflight
    passed where rank 0's failed."""
    if not ctx.distributed:
        return prepare(progress())
    store = dist.distributed_c10d._get_default_store()
    _CALLS[ctx.rank] += 1
    call = _CALLS[ctx.rank]
    outcome_key, ack_key = f"{PREFLIGHT_KEY}/{call}", f"{ACK_KEY}/{call}"
    if ctx.is_main:
        outcome = FAILED
        try:
            result = prepare(progress())
            outcome = DONE
            return result
        except TrainingStopped as stop:
            outcome = STOPPED_SAVE if stop.save else STOPPED
            raise
        finally:
            store.set(outcome_key, outcome)
            while store.add(ack_key, 0) < ctx.world_size - 1:
                time.sleep(POLL_S)
    while not store.check([outcome_key]):
        if should_stop is not None:
            should_stop()  # this rank's beat; rank 0's stop is the one followed
        time.sleep(POLL_S)
    outcome = store.get(outcome_key)
    store.add(ack_key, 1)
    if outcome in (STOPPED, STOPPED_SAVE):
        raise TrainingStopped(outcome == STOPPED_SAVE)
    result = prepare(None)
    if outcome == FAILED:  # rank 0 has ended: never go on without it (RELIABILITY 392)
        raise RankPreflightFailed(
            f"rank 0's preflight failed (its error is the run's); rank {ctx.rank} found nothing wrong"
        )
    return result
