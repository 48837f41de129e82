"""One rank of the data-parallel benchmark (bench/bench_ddp.py launches it under torchrun:
`python -m bench.ddp_rank FAMILY --row-file F --batches 2,4 --extra-until T [--tiny] [--eager]`).
It builds the case (full-size or tiny denoiser, default LoRA, regional compile), wraps it in DDP
when there are several ranks and times each global batch; rank 0 appends the rows to F.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FAMILIES = ("flux", "qwen")


@dataclass(frozen=True)
class Mode:
    """What differs between the GPU benchmark and its CPU rehearsal."""

    tiny: bool
    resolution: int
    warm: int  # steps before timing, the first (compile) step included
    windows: int
    steps: int  # steps per timed window
    reserve_s: float  # time kept for each later run's first global batch
    extra_margin_s: float  # slack required before starting an optional (larger) global batch


FULL = Mode(tiny=False, resolution=1024, warm=3, windows=3, steps=4, reserve_s=110.0, extra_margin_s=15.0)
TINY = Mode(tiny=True, resolution=64, warm=2, windows=2, steps=3, reserve_s=25.0, extra_margin_s=5.0)
TINY_TEXT_TOKENS = 8


# --- one rank -------------------------------------------------------------------------------------
@dataclass
class Case:
    """One rank's engine objects for a family: config, family hooks, objective, denoiser + LoRA."""

    name: str
    family: Any
    cfg: Any
    objective: Any
    model: Any
    params: list[Any]
    compiled: bool  # the regional compile was set up (time_global_batch reports any fallback)
    build_s: float


def build_case(name: str, mode: Mode, device: Any, compile_blocks: bool) -> Case:
    """Build family `name`'s denoiser on `device` (full size bf16, or the tiny fp32 one), add the
    family's default LoRA (seeded: every rank gets the same init) and, if `compile_blocks`, the
    regional compile. Raises what the builders raise."""
    import torch

    from bench.bench_step import SCHEDULERS
    from bench.harness import engine_config
    from bench.models import FAMILY_KEYS, build_denoiser
    from lorastudio import families
    from lorastudio.training.adapters.lora import add_lora, lora_config_for
    from lorastudio.training.noise import make_objective
    from lorastudio.training.speed.compile import compile_denoiser

    t0 = time.monotonic()
    cfg = engine_config(name)
    family = families.get(cfg.family)
    if mode.tiny:
        from lorastudio.tiny import build_tiny_pipeline

        pipe = build_tiny_pipeline(FAMILY_KEYS[name], seed=0)
        model = pipe.transformer.to(device).requires_grad_(False).train()
        scheduler_config: Any = dict(pipe.scheduler.config)
    else:
        model = build_denoiser(name, str(device), torch.bfloat16)
        scheduler_config = SCHEDULERS[name]
    objective = make_objective(family, cfg, scheduler_config)
    torch.manual_seed(0)
    params = add_lora(model, lora_config_for(cfg, family.spec.lora_targets))
    compiled = compile_blocks and compile_denoiser(model, params).active
    return Case(name, family, cfg, objective, model, params, compiled, time.monotonic() - t0)


def global_batch(
    case: Case, size: int, mode: Mode, device: Any
) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """The same global batch on every rank: (latents [B,C,h,w] on `device`, collated conditioning
    on the CPU, batch_info). Full mode: bench.models.synthetic_batch (real shapes); tiny mode: the
    same layout sized from the tiny denoiser's config."""
    import torch

    from bench.models import synthetic_batch

    dtype = torch.float32 if mode.tiny else torch.bfloat16  # the tiny models are fp32
    if not mode.tiny:
        return synthetic_batch(case.name, size, mode.resolution, str(device), dtype)
    config = case.model.config
    g = torch.Generator().manual_seed(1)
    side = mode.resolution // 8
    channels = config.in_channels // 4  # the families pack 2x2 latent patches
    latents = torch.randn(size, channels, side, side, generator=g).to(device, dtype)  # [B, C, h, w]
    embeds = torch.randn(size, TINY_TEXT_TOKENS, config.joint_attention_dim, generator=g)  # [B, L, D]
    if case.name == "flux":
        pooled = torch.randn(size, config.pooled_projection_dim, generator=g)  # [B, Dp]
        cond: dict[str, Any] = {"prompt_embeds": embeds.to(dtype), "pooled": pooled.to(dtype)}
    else:
        mask = torch.ones(size, TINY_TEXT_TOKENS, dtype=torch.long)  # [B, L]
        cond = {"prompt_embeds": embeds.to(dtype), "prompt_mask": mask}
    info = {
        "original_size": [(mode.resolution, mode.resolution)] * size,
        "crop_top_left": [(0, 0)] * size,
        "target_size": (mode.resolution, mode.resolution),
    }
    return latents, cond, info


def timed_windows(step: Any, device: Any, windows: int, steps: int) -> list[float]:
    """Seconds per step of each of `windows` windows of `steps` calls: CUDA events on a GPU,
    perf_counter on the CPU (where every call already ends on the host)."""
    import torch

    per_step = []
    for _ in range(windows):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(steps):
                step()
            end.record()
            torch.cuda.synchronize(device)
            per_step.append(start.elapsed_time(end) / 1000 / steps)
        else:
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            per_step.append((time.perf_counter() - t0) / steps)
    return per_step


def time_global_batch(case: Case, size: int, mode: Mode, ctx: Any, ddp: Any, device: Any) -> dict[str, Any]:
    """Time the engine step on a global batch of `size` samples (this rank's slice of it under
    DDP). Collective: every rank calls it with the same arguments. Returns the run's row (the
    same on every rank). Raises ConfigError when `size` does not divide by the ranks."""
    import torch

    from bench.harness import loop_step
    from lorastudio.training.distributed import check_parallel_config, gather_round
    from lorastudio.training.precision import peak_memory_gb
    from lorastudio.training.speed.compile import compile_state

    check_parallel_config(case.cfg.model_copy(update={"batch_size": size, "num_gpus": ctx.world_size}), ctx)
    shard = ctx.shard(size) if ctx.distributed else None
    losses: list[float] = []
    norms: list[float] = []
    step = loop_step(
        case.family, case.model, case.objective, case.cfg, case.params, global_batch(case, size, mode, device),
        losses, shard=shard, forward_module=ddp, ctx=ctx, norms=norms,
    )  # fmt: skip
    t0 = time.perf_counter()
    step()  # compiles the blocks (full mode); ends with the step's host read
    first_step_s = time.perf_counter() - t0
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    for _ in range(mode.warm - 1):
        step()
    per_step = timed_windows(step, device, mode.windows, mode.steps)
    mine = {"median": statistics.median(per_step), "windows": per_step, "peak_gib": peak_memory_gb(device)}
    ranks = gather_round(mine, ctx)
    sec = max(r["median"] for r in ranks)  # the slowest rank bounds the step
    windows = [max(w) for w in zip(*(r["windows"] for r in ranks), strict=True)]
    return {
        "global_batch": size,
        "local_batch": size // ctx.world_size,
        "s_per_step": round(sec, 5),
        "spread": round((max(windows) - min(windows)) / sec, 3),
        "samples_per_s": round(size / sec, 4),
        "samples_per_s_raw": size / sec,
        "peak_gib_per_rank": [round(r["peak_gib"], 2) for r in ranks],
        "first_step_s": round(first_step_s, 2),
        "losses": losses[:4],
        "grad_norms": norms[:4],
        "compiled": case.compiled,
        "compile_fallback": state.fallback_reason if (state := compile_state(case.model)) else None,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
    }


def _extra_fits(done: dict[str, Any], size: int, mode: Mode, extra_until: float) -> bool:
    """Whether a larger global batch `size` fits before `extra_until` (epoch seconds), estimated
    from the batch just timed: a recompile as long as its first step plus every step scaled by
    the batch ratio."""
    scale = size / done["global_batch"]
    steps = mode.warm + mode.windows * mode.steps
    estimate = done["first_step_s"] + steps * done["s_per_step"] * scale + mode.extra_margin_s
    return time.time() + estimate < extra_until


def rank_main(args: argparse.Namespace) -> None:
    """One torchrun rank: build, wrap in DDP when there are several ranks, time each global batch
    of args.batches (the first always, later ones while they fit before args.extra_until, as
    rank 0 decides for every rank); rank 0 appends the rows to args.row_file."""
    import torch

    from lorastudio.training.distributed import (
        end_group,
        gather_round,
        launched_context,
        start_group,
        wrap_denoiser,
    )
    from lorastudio.training.precision import free_accelerator_memory, run_numerics

    mode = TINY if args.tiny else FULL
    ctx = launched_context()
    device = torch.device("cpu") if mode.tiny else torch.device("cuda", ctx.local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    ctx = start_group(ctx, device)
    label = {"family": args.rank_run, "world_size": ctx.world_size, "mode": "tiny" if mode.tiny else "full"}
    try:
        case = build_case(args.rank_run, mode, device, compile_blocks=not (mode.tiny or args.eager))
        with run_numerics(case.cfg.enable_tf32, device):
            ddp = wrap_denoiser(case.model, device) if ctx.distributed else None
            label["build_s"] = round(case.build_s, 1)
            done: dict[str, Any] | None = None
            for size in [int(b) for b in args.batches.split(",")]:
                go = done is None or _extra_fits(done, size, mode, args.extra_until)
                if not gather_round(go, ctx)[0]:  # rank 0's decision, on every rank
                    _write_row(args.row_file, ctx, {**label, "global_batch": size, "skipped": "deadline"})
                    continue
                try:
                    done = time_global_batch(case, size, mode, ctx, ddp, device)
                    row = {**label, **done}
                except torch.OutOfMemoryError:
                    row = {**label, "global_batch": size, "oom": True}
                    free_accelerator_memory(device)
                _write_row(args.row_file, ctx, row)
                if row.get("oom"):
                    break  # a larger batch would not fit either
    finally:
        end_group(ctx)


def _write_row(path: Path, ctx: Any, row: dict[str, Any]) -> None:
    if ctx.is_main:
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description="one rank of bench.bench_ddp (launched by torchrun)")
    parser.add_argument("rank_run", choices=FAMILIES)
    parser.add_argument("--row-file", type=Path, required=True)
    parser.add_argument("--batches", required=True)
    parser.add_argument("--extra-until", type=float, default=0.0)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--eager", action="store_true")
    rank_main(parser.parse_args())


if __name__ == "__main__":
    main()
