"""Data-parallel training: one process per device, launched by torchrun or `accelerate launch`
(they set RANK, WORLD_SIZE and LOCAL_RANK), gradients averaged by PyTorch DDP.

The maths equals the single-process run of the same config: the conditioning and the latent
cache are built once, shared out (each rank encodes its round-robin share of the caption chunks
and of the images, `gather_round` all-gathers each round: the same tensors as one process, see
training/inputs/conditioning.py and training/inputs/latents.py), every rank walks the same sampler, and draws
the latents, noise and timesteps of the GLOBAL batch from the same seeded generators; each rank
then keeps its contiguous slice of the batch (`BatchShard`). The local loss share is multiplied by the world
size so that DDP's average of the gradients is the gradient of the global mean loss; the step
loss is all-reduced (summed) so every rank reports and guards the same value.

Only rank 0 emits events and writes files; stop requests are polled on rank 0 and agreed on by
every rank at each poll (`agree_stop`), so all ranks stop at the same point.

The job service launches such runs through torchrun (jobs/launcher.py); `lorastudio train
--gpus N` does too. What a data-parallel config must satisfy is in training/parallel_rules.py
(batch_size divisible by the ranks; no lora_dropout).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from lorastudio.errors import ConfigError, FieldProblem, TrainingStopped
from lorastudio.training.events import StopCheck, StopRequest
from lorastudio.training.parallel_rules import data_parallel_problems

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.training.noise import NoisedBatch

T = TypeVar("T")

# How long a rank waits in a collective for the others. Rank 0 works alone while the others wait
# in the next stop poll: a sample round, a checkpoint, a LoRA snapshot, validation's writes; a
# sample round of a large model can outlast torch's default (NCCL: 10 minutes) and the watchdog
# would end the run. The job service bounds that work itself (stop requests; a dead rank ends
# the job at once, jobs/launcher.py), so the ranks wait as long as a day.
COLLECTIVE_TIMEOUT = timedelta(hours=24)

LAUNCHER_HINT = (
    "launch one process per GPU with torchrun or accelerate launch "
    "(e.g. `torchrun --nproc_per_node {n} -m lorastudio.cli train ...`), or let the job service "
    "or `lorastudio train --gpus {n}` launch it (calling train() itself cannot launch processes)"
)


@dataclass(frozen=True)
class ParallelContext:
    """Where this process stands in the launch. world_size 1: a plain single-process run."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    owns_group: bool = False  # this module created the process group (and destroys it)

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, batch_size: int) -> BatchShard:
        """This rank's contiguous slice of a global batch of `batch_size` samples."""
        start = self.rank * batch_size // self.world_size
        stop = (self.rank + 1) * batch_size // self.world_size
        return BatchShard(start, stop, batch_size, float(self.world_size))


def launched_context() -> ParallelContext:
    """The launch this process is part of, read from torchrun's environment (RANK, WORLD_SIZE,
    LOCAL_RANK); a single-process context when WORLD_SIZE is unset or 1.
    Raises ConfigError for malformed values."""
    raw = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    if raw["WORLD_SIZE"] is None:
        return ParallelContext()
    try:
        world = int(raw["WORLD_SIZE"] or "1")
        rank = int(raw["RANK"] or "0")
        local = int(raw["LOCAL_RANK"] or str(rank))
    except ValueError:
        raise ConfigError(
            [FieldProblem("num_gpus", f"malformed launch environment {raw}: expected integers")]
        ) from None
    if world < 1 or not 0 <= rank < world or local < 0:
        raise ConfigError([FieldProblem("num_gpus", f"inconsistent launch environment {raw}")])
    return ParallelContext(rank=rank, world_size=world, local_rank=local)


def group_context() -> ParallelContext:
    """This process's place in the initialised default process group (a single-process context
    when there is none): what the cache builders use to share their work out."""
    if not (dist.is_available() and dist.is_initialized()):
        return ParallelContext()
    rank = dist.get_rank()
    return ParallelContext(rank=rank, world_size=dist.get_world_size(), local_rank=rank)


def gather_round(value: T, ctx: ParallelContext) -> list[T]:
    """Every rank's `value` (any picklable object; tensors should be on the CPU), in rank order:
    an all-gather, so every rank must call it at the same points. [value] for one process."""
    if not ctx.distributed:
        return [value]
    out: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(out, value)
    return out


def round_robin(count: int, ctx: ParallelContext) -> Iterator[tuple[range, int | None]]:
    """Rounds over `count` work items: (the round's item indices, this rank's item or None).
    Round k holds items k*W .. k*W+W-1 (W the world size); rank r takes the r-th of them."""
    for first in range(0, count, ctx.world_size):
        items = range(first, min(first + ctx.world_size, count))
        yield items, (first + ctx.rank if ctx.rank < len(items) else None)


def check_parallel_config(cfg: TrainConfig, ctx: ParallelContext) -> None:
    """Refuse a config the launch cannot run exactly. Raises ConfigError: num_gpus differs from
    the launched world size (a num_gpus > 1 run started as one process names the launchers),
    batch_size does not divide by the world size, or lora_dropout > 0 with several ranks
    (training/parallel_rules.py)."""
    problems = []
    if cfg.num_gpus != ctx.world_size:
        if ctx.world_size == 1:
            message = (
                f"num_gpus={cfg.num_gpus} needs {cfg.num_gpus} processes, but this run was started "
                "as a single process: " + LAUNCHER_HINT.format(n=cfg.num_gpus)
            )
        else:
            message = (
                f"num_gpus={cfg.num_gpus} but this run was launched with {ctx.world_size} "
                "processes: set num_gpus to the number of launched processes"
            )
        problems.append(FieldProblem("num_gpus", message))
    problems += data_parallel_problems(ctx.world_size, cfg.batch_size, cfg.lora_dropout)
    if problems:
        raise ConfigError(problems)


def process_device(device: str | None, ctx: ParallelContext) -> str | None:
    """The device of this process: unchanged for a single-process run; for a distributed one,
    cuda:LOCAL_RANK when `device` is None/"cuda" and CUDA is available, else what was asked."""
    if not ctx.distributed:
        return device
    if device in (None, "cuda") and torch.cuda.is_available():
        return f"cuda:{ctx.local_rank}"
    return device or "cpu"


def start_group(ctx: ParallelContext, device: torch.device) -> ParallelContext:
    """Join the launch's process group (nccl on CUDA, gloo on CPU; MASTER_ADDR/MASTER_PORT from
    the launcher; collectives wait up to COLLECTIVE_TIMEOUT) unless one is already initialised. Returns ctx with owns_group set when this
    call created the group. A no-op for a single-process context."""
    if not ctx.distributed:
        return ctx
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if dist.is_initialized():
        if dist.get_world_size() != ctx.world_size or dist.get_rank() != ctx.rank:
            raise ConfigError(
                [
                    FieldProblem(
                        "num_gpus", "the initialised process group differs from the launch environment"
                    )
                ]
            )
        return ctx
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, rank=ctx.rank, world_size=ctx.world_size, timeout=COLLECTIVE_TIMEOUT)
    return replace(ctx, owns_group=True)


def end_group(ctx: ParallelContext) -> None:
    """Destroy the process group if start_group created it."""
    if ctx.owns_group and dist.is_initialized():
        dist.destroy_process_group()


def barrier(ctx: ParallelContext) -> None:
    """Wait for every rank (no-op for a single process)."""
    if ctx.distributed:
        dist.barrier()


class _DenoiserDDP(DistributedDataParallel):
    """DDP that still answers the wrapped denoiser's attributes (family hooks read
    `denoiser.config`)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)


def wrap_denoiser(denoiser: torch.nn.Module, device: torch.device) -> DistributedDataParallel:
    """DDP over the denoiser's trainable (LoRA) parameters: frozen parameters and buffers are
    neither broadcast nor reduced (every rank loaded the same base). find_unused_parameters is
    on: some LoRA layers never get a gradient (Qwen-Image's last block's attn.to_add_out: that
    block's text-stream output is discarded), so DDP must not wait for them; their .grad stays
    None, as in one process. (static_graph=True would skip the per-step graph walk but fails
    DDP's reducer when the first backward runs under no_sync, i.e. grad_accum > 1 or
    micro-batches.) Returns the wrapper; the denoiser itself stays the object that is
    checkpointed, exported and sampled."""
    frozen = [name for name, p in denoiser.named_parameters() if not p.requires_grad]
    frozen += [name for name, _ in denoiser.named_buffers()]
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(denoiser, frozen)
    device_ids = [device.index] if device.type == "cuda" else None
    return _DenoiserDDP(denoiser, device_ids=device_ids, find_unused_parameters=True, broadcast_buffers=False)


@contextlib.contextmanager
def gradient_sync(wrapper: DistributedDataParallel | None, sync: bool) -> Iterator[None]:
    """Within: backward passes all-reduce gradients only when `sync` (the last micro-batch of a
    step); the others accumulate locally (DDP no_sync). No-op without a wrapper."""
    if wrapper is None or sync:
        yield
    else:
        with wrapper.no_sync():
            yield


def all_reduce_sum(value: float, ctx: ParallelContext, device: torch.device) -> float:
    """The sum of `value` over the ranks (the value itself for a single process)."""
    if not ctx.distributed:
        return value
    on = device if device.type == "cuda" else torch.device("cpu")
    total = torch.tensor([value], dtype=torch.float64, device=on)  # [1]
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return float(total.item())


def agree_stop(request: StopRequest | None, ctx: ParallelContext, device: torch.device) -> StopRequest | None:
    """Every rank's view of rank 0's stop request (a collective: all ranks must call it at the
    same points). Other ranks' own requests are ignored."""
    if not ctx.distributed:
        return request
    code = 0 if request is None or not ctx.is_main else (2 if request.save else 1)
    on = device if device.type == "cuda" else torch.device("cpu")
    flag = torch.tensor([code], dtype=torch.int32, device=on)  # [1]
    dist.broadcast(flag, src=0)
    agreed = int(flag.item())
    return None if agreed == 0 else StopRequest(save=agreed == 2)


class StopPoll:
    """Polls the StopCheck; raises TrainingStopped(save) when a stop was requested. In a
    data-parallel run every rank polls its own (a job's rank tells its launcher so that it still
    answers: jobs/rank_silence.py) and adopts rank 0's answer (each call is a collective: every
    rank calls it at the same points of the run)."""

    def __init__(self, should_stop: StopCheck | None, ctx: ParallelContext, device: torch.device):
        self.should_stop = should_stop
        self.ctx, self.device = ctx, device

    def __call__(self) -> None:
        request = self.should_stop() if self.should_stop is not None else None
        request = agree_stop(request, self.ctx, self.device)
        if request is not None:
            raise TrainingStopped(request.save)


@dataclass(frozen=True)
class BatchShard:
    """A rank's contiguous slice [start, stop) of a global batch of `size` samples.
    grad_factor (the world size) undoes DDP's averaging of gradients over the ranks."""

    start: int
    stop: int
    size: int
    grad_factor: float

    def take(
        self, noised: NoisedBatch, cond: dict[str, Any], batch_info: dict[str, Any]
    ) -> tuple[NoisedBatch, dict[str, Any], dict[str, Any]]:
        """This rank's part of a global noised batch, collated conditioning and batch info.

        Per-sample values (tensors whose first axis is the batch, lists of one entry per sample)
        are sliced; everything else (tuples such as target_size, scalars) is per-batch and kept.
        An empty slice (a tail batch smaller than the world) becomes the batch's first sample
        with loss weight 0, so the rank still joins DDP's gradient all-reduce and adds nothing.
        """
        part = slice(self.start, self.stop)
        empty = self.stop <= self.start
        if empty:
            part = slice(0, 1)
        noisy = noised.noisy[part]  # [b, C, h, w]
        weight = noised.weight[part] * 0 if empty else noised.weight[part]  # [b]
        loss_c = None if noised.loss_c is None else noised.loss_c[part]  # [b]
        local = type(noised)(noisy, noised.noise_level[part], noised.target[part], weight, loss_c)
        return local, _slice_values(cond, part, self.size), _slice_values(batch_info, part, self.size)


def _slice_values(values: dict[str, Any], part: slice, size: int) -> dict[str, Any]:
    out = {}
    for key, value in values.items():
        if isinstance(value, tuple) and value and all(isinstance(v, torch.Tensor) for v in value):
            # per-slot tensors (control latents of their own sizes): each sliced on its batch axis
            out[key] = tuple(v[part] if v.dim() > 0 and v.shape[0] == size else v for v in value)
            continue
        per_sample = (isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == size) or (
            isinstance(value, list) and len(value) == size
        )
        out[key] = value[part] if per_sample else value
    return out
