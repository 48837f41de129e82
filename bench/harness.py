"""What the GPU benchmarks share: the engine config of a bench family, the loop-style step, and
running one case per subprocess (a crash, an OOM or a compile cache poisons only its own case).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROW_PREFIX = "ROW "


def engine_config(name: str, **overrides: Any) -> Any:
    """The TrainConfig every bench case of family `name` (bench.models.FAMILY_KEYS) trains with:
    LoRA rank 16 (alpha 16) on the family's default targets, lr 1e-4, clipping at 1.0, min-SNR 5
    for SDXL; `overrides` replace or add settings (e.g. adapter="lokr", optimizer="adamw8bit")."""
    from bench.models import FAMILY_KEYS
    from lorastudio.config import TrainConfig

    settings: dict[str, Any] = dict(
        family=FAMILY_KEYS[name],
        base_model="bench/random-init",
        data_dir="bench",
        lora_rank=16,
        lora_alpha=16.0,
        learning_rate=1e-4,
        max_grad_norm=1.0,
        snr_gamma=5.0 if name == "sdxl" else None,
    )
    return TrainConfig(**{**settings, **overrides})


def loop_step(
    family: Any,
    denoiser: Any,
    objective: Any,
    cfg: Any,
    params: list[Any],
    batch: tuple[Any, dict[str, Any], dict[str, Any]],
    losses: list[float],
    seed: int = 7,
    *,
    shard: Any = None,
    forward_module: Any = None,
    ctx: Any = None,
    norms: list[float] | None = None,
    host_read: str = "sync",
    preserve: float | None = None,
) -> Callable[[], None]:
    """One optimizer step the way training/optimize.py runs it (grad_accum 1): forward_backward,
    clip, ONE host read of the loss and grad norm together, fused AdamW, zero_grad. `batch` is
    (latents [B,C,h,w], collated conditioning, batch_info); each step's loss is appended to
    `losses` and, when `norms` is given, its gradient norm before clipping to `norms`.

    Data-parallel (training/distributed.py): `batch` is the GLOBAL batch, `shard` this rank's
    slice of it (ctx.shard(B)), `forward_module` the DDP wrapper of `denoiser` and `ctx` the
    ParallelContext: the step loss is all-reduced over the ranks as the loop does, so every rank
    records the global step loss.

    `host_read`: "sync" (the loop today: the loss and grad norm are read before the optimizer
    step, so the GPU drains once per step), "lag" (the engine's pipelined loop on CUDA,
    training/optimize.py StepInFlight: the update is queued at once, skipped on the device when
    a value is not finite, and the values are read after the next step is queued: the GPU never
    drains; `losses` lags one step) or "none" (never read: the upper bound).

    `preserve`: the weight of differential output preservation (training/preservation.py): each
    step also runs its pass on the same draws (the batch's conditioning standing in for the
    class captions: the cost is the same), one process only."""
    import torch

    from lorastudio.training.distributed import all_reduce_sum
    from lorastudio.training.optim import make_optimizer
    from lorastudio.training.optimize import StepInFlight
    from lorastudio.training.step import forward_backward

    latents, cond, info = batch
    opt = make_optimizer(params, cfg)
    scaler = torch.amp.GradScaler("cuda", enabled=False)
    generator = torch.Generator().manual_seed(seed)
    samples = latents.shape[0]

    pending: list[Any] = []  # "lag": the last step's StepInFlight, read after the next is queued
    constant_lr = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)

    def backward() -> tuple[Any, Any]:
        """forward/backward and clipping: (loss share [], grad norm []) on the device."""
        drawn = objective.noise(latents, generator) if preserve is not None else None
        share = forward_backward(
            family, denoiser, objective, latents, cond, info, cfg, generator, samples, scaler,
            shard=shard, forward_module=forward_module, noised=drawn,
        )  # fmt: skip
        if preserve is not None:
            from lorastudio.training.preservation import preservation_pass

            share = share + preservation_pass(
                family, denoiser, drawn, cond, info, cfg, preserve, samples, scaler
            )  # type: ignore[arg-type]
        return share, torch.nn.utils.clip_grad_norm_(params, 1.0)

    def lagged_step() -> None:
        share, norm = backward()
        flight = StepInFlight(0, 0, 0.0, samples, torch.stack([share.double(), norm.double()]))
        flight.apply_on_device(opt, constant_lr)  # as the loop does on CUDA
        if pending:  # the previous step's values: ready long ago, no drain of the queue
            loss, grad_norm = pending.pop().read()
            losses.append(loss)
            if norms is not None:
                norms.append(grad_norm)
        if host_read == "lag":
            pending.append(flight)

    def step() -> None:
        share, norm = backward()
        loss, grad_norm = torch.stack([share.double(), norm.double()]).tolist()  # the loop's one sync
        if ctx is not None:
            loss = all_reduce_sum(loss, ctx, latents.device)  # the global step loss on every rank
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss)
        if norms is not None:
            norms.append(grad_norm)

    if host_read not in ("sync", "lag", "none"):
        raise ValueError(f"host_read must be sync, lag or none, not {host_read!r}")
    return step if host_read == "sync" else lagged_step


def child_main(case: str, run: Callable[[str], dict[str, Any]], label: dict[str, Any]) -> None:
    """In the child: run one case and print its row (a failure becomes the row's "error")."""
    try:
        row = run(case)
    except Exception as err:  # noqa: BLE001 -- a benchmark: report the failure as data
        row = {**label, "error": f"{type(err).__name__}: {str(err)[:400]}"}
    print(ROW_PREFIX + json.dumps(row), flush=True)


def run_isolated(
    module: str, case: str, label: dict[str, Any], deadline: float, min_left_s: float
) -> dict[str, Any]:
    """Run `python -m module --one case x` until `deadline` (time.monotonic()) and return the row
    it printed, or a row saying why there is none (skipped, timeout, crash with stderr's tail)."""
    left = deadline - time.monotonic()
    if left < min_left_s:
        return {**label, "skipped": "deadline"}
    cmd = [sys.executable, "-m", module, "--one", case, "x"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=left - 5, env=os.environ)
    except subprocess.TimeoutExpired:
        return {**label, "timeout": True}
    rows = [ln[len(ROW_PREFIX) :] for ln in proc.stdout.splitlines() if ln.startswith(ROW_PREFIX)]
    if not rows:
        return {**label, "crash": proc.returncode, "stderr": proc.stderr[-600:]}
    return json.loads(rows[-1])


def append_row(out: Path, filename: str, row: dict[str, Any]) -> None:
    """Print `row` as one JSON line and append it to out/filename."""
    line = json.dumps(row)
    print(line, flush=True)
    with (out / filename).open("a") as f:
        f.write(line + "\n")
