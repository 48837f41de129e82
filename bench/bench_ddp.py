"""Data-parallel benchmark: samples/s of the engine's step on 2 GPUs against 1 GPU, same run
(issue #9: >= 1.8x for FLUX.1 and Qwen-Image at 1024 px).

For each family the driver launches the engine's data-parallel step under torchrun twice: with 1
rank, then with 2 (`python -m torch.distributed.run --standalone --nproc-per-node N -m
bench.bench_ddp --rank-run FAMILY ...`). Every rank builds the full-size random-init denoiser on
its own GPU (bench.models.build_denoiser), the family's default LoRA (training.lora) and the
regional compile (training.compile); with 2 ranks the denoiser is wrapped in DDP by
training.distributed.wrap_denoiser. The step is bench.harness.loop_step, the loop's step: every
rank draws the GLOBAL batch's noise and timesteps from the same seed, keeps its slice
(ctx.shard), forwards through the DDP wrapper, and the step loss is all-reduced. The global batch
is the same for both runs (2, then 4 if time allows): 1 rank does every sample, 2 ranks half each.

Timed per global batch: the first step (compile) separately, warm-up steps, then windows of steps
between CUDA events (perf_counter on the CPU); s/step = the slowest rank's median window.
samples/s = global batch / s/step. Peak = training.precision.peak_memory_gb per rank after the
first step (CUDA: allocated peak; CPU: the process RSS peak, never reset). Rank 0 appends one
JSON row per (run, global batch); the driver adds one "ratio" row per family and batch measured
by both runs (2-rank samples/s / 1-rank samples/s against TARGET_RATIO) and prints a table.

`--tiny` runs the same on the CPU (gloo, eager) with the tiny models of lorastudio.tiny at a
small resolution: what the unit test exercises (launcher, sharding, DDP, reporting).

usage: PYTHONPATH=src:. python -m bench.bench_ddp --out DIR --deadline-s S [--tiny] flux qwen
       Writes DIR/ddp.jsonl (rows), DIR/ddp-table.md and one torchrun log per run
       (DIR/ddp-FAMILY-wN.log). NCCL's NVLink multicast stays off (NCCL_NVLS_ENABLE=0 ...).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import append_row

FAMILIES = ("flux", "qwen")
TARGET_RATIO = 1.8  # issue #9: 2-GPU samples/s >= 1.8x one GPU's
ROWS_FILE = "ddp.jsonl"
REPO = Path(__file__).resolve().parents[1]
# Never use NVLink multicast on the lent machines (KINDS.md): kept set for every launched rank.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


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
    from lorastudio.training.compile import compile_denoiser
    from lorastudio.training.lora import add_lora, lora_config_for
    from lorastudio.training.noise import make_objective

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
    from lorastudio.training.compile import compile_state
    from lorastudio.training.distributed import check_parallel_config, gather_round
    from lorastudio.training.precision import peak_memory_gb

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
        with path.open("a") as f:
            f.write(json.dumps(row) + "\n")


# --- the driver -----------------------------------------------------------------------------------
def launch(family: str, world: int, batches: list[int], mode: Mode, args: argparse.Namespace,
           timeout_s: float, extra_until: float) -> list[dict[str, Any]]:  # fmt: skip
    """Run family `family` under torchrun with `world` ranks and return rank 0's rows, or one row
    saying why there are none (timeout: the whole process group is killed; crash: the log's
    tail). torchrun's output goes to out/ddp-FAMILY-wWORLD.log."""
    label = {"family": family, "world_size": world, "mode": "tiny" if mode.tiny else "full"}
    with tempfile.TemporaryDirectory() as tmp:
        row_file = Path(tmp) / "rows.jsonl"
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(world),
            "-m", "bench.bench_ddp", "--rank-run", family, "--row-file", str(row_file),
            "--batches", ",".join(map(str, batches)), "--extra-until", f"{extra_until:.1f}",
            *(["--tiny"] if mode.tiny else []), *(["--eager"] if args.eager else []),
        ]  # fmt: skip
        env = {**os.environ, **NO_MULTICAST}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        log_path = args.out / f"ddp-{family}-w{world}.log"
        with log_path.open("w") as log:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
            try:
                code = proc.wait(timeout=max(timeout_s, 1.0))
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                return [{**label, "timeout": True, "timeout_s": round(timeout_s)}]
        rows = [json.loads(line) for line in row_file.read_text().splitlines()] if row_file.exists() else []
    if code != 0 or not rows:
        return [
            *rows,
            {**label, "crash": code, "log_tail": _crash_excerpt(log_path.read_text(errors="replace"))},
        ]
    return rows


def _crash_excerpt(log: str, chars: int = 1200) -> str:
    """The end of a failed run's log before torchrun's own failure report (the ranks' error)."""
    cut = log.find("failed (exitcode")
    return (log if cut < 0 else log[:cut])[-chars:]


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    """End torchrun and its ranks (its own process session): SIGTERM, then SIGKILL after 10 s."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def ratio_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (family, global batch) timed with 1 and with 2 ranks: the 2-rank samples/s
    over the 1-rank samples/s (the unrounded rates) against TARGET_RATIO, and the largest relative
    difference of their step losses (same maths: float noise only)."""
    timed = {(r["family"], r["global_batch"], r["world_size"]): r for r in rows if "samples_per_s_raw" in r}
    out = []
    for (family, size, world), one in timed.items():
        two = timed.get((family, size, 2))
        if world != 1 or two is None:
            continue
        ratio = two["samples_per_s_raw"] / one["samples_per_s_raw"]
        loss_diff = max(
            abs(b - a) / max(abs(a), 1e-12) for a, b in zip(one["losses"], two["losses"], strict=True)
        )
        out.append({"family": family, "case": "ratio", "global_batch": size,
                    "samples_per_s_1": round(one["samples_per_s_raw"], 4),
                    "samples_per_s_2": round(two["samples_per_s_raw"], 4), "ratio": round(ratio, 4),
                    "target": TARGET_RATIO, "met": ratio >= TARGET_RATIO, "loss_max_rel_diff": loss_diff})  # fmt: skip
    return out


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of the timed runs and the ratios."""
    lines = [
        "| family | ranks | global batch | s/step | samples/s | peak GiB per rank | first step s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.get("case") == "ratio" or "world_size" not in r:
            continue
        result = r.get("samples_per_s", "OOM" if r.get("oom") else _failure(r))
        lines.append(f"| {r['family']} | {r['world_size']} | {r.get('global_batch', '-')} | {r.get('s_per_step', '-')} | "
                     f"{result} | {r.get('peak_gib_per_rank', '-')} | {r.get('first_step_s', '-')} |")  # fmt: skip
    for r in rows:
        if r.get("case") == "ratio":
            verdict = "met" if r["met"] else "NOT met"
            lines.append(f"\n{r['family']} global batch {r['global_batch']}: 2 ranks {r['samples_per_s_2']} vs "
                         f"1 rank {r['samples_per_s_1']} samples/s = {r['ratio']:.3f}x "
                         f"(target {r['target']}x: {verdict}; losses within {r['loss_max_rel_diff']:.1e})")  # fmt: skip
    return "\n".join(lines)


def _failure(row: dict[str, Any]) -> str:
    for key in ("skipped", "timeout", "crash", "error"):
        if key in row:
            return f"{key}: {row[key]}"
    return "-"


def drive(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run every family with 1 then 2 ranks within args.deadline_s; write and return the rows
    (run rows, then ratio rows)."""
    mode = TINY if args.tiny else FULL
    args.out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.deadline_s
    batches = [int(b) for b in args.batches.split(",")]
    # the driver never initialises CUDA (a context on GPU 0 would take memory from rank 0)
    env_row = {"case": "env", "mode": "tiny" if mode.tiny else "full", "resolution": mode.resolution,
               "batches": batches, "date": time.strftime("%Y-%m-%d")}  # fmt: skip
    append_row(args.out, ROWS_FILE, env_row)
    runs = [(family, world) for family in args.families for world in (1, 2)]
    rows: list[dict[str, Any]] = []
    for i, (family, world) in enumerate(runs):
        left = deadline - time.monotonic() - mode.reserve_s * (len(runs) - i - 1)
        if world == 2:  # only the global batches the 1-rank run measured can give a ratio
            measured = {r["global_batch"] for r in rows if r["family"] == family and "samples_per_s_raw" in r}
            run_batches = [b for b in batches if b in measured] or batches[:1]
        else:
            run_batches = batches
        if left < mode.reserve_s / 2:
            new = [{"family": family, "world_size": world, "skipped": "deadline"}]
        else:  # a 1-rank run's larger batch also leaves time for the 2-rank run's
            extra_until = time.time() + left - (mode.reserve_s / 2 if world == 1 else 0.0)
            new = launch(family, world, run_batches, mode, args, left, extra_until)
        for row in new:
            append_row(args.out, ROWS_FILE, row)
        rows += new
    ratios = ratio_rows(rows)
    for row in ratios:
        append_row(args.out, ROWS_FILE, row)
    text = table(rows + ratios)
    (args.out / "ddp-table.md").write_text(text + "\n")
    print(text, flush=True)
    return rows + ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("families", nargs="*", help="flux, qwen")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--deadline-s", type=float, default=540.0)
    parser.add_argument("--batches", default="2,4", help="global batch sizes, the first always timed")
    parser.add_argument("--tiny", action="store_true", help="tiny models on the CPU (gloo, eager)")
    parser.add_argument("--eager", action="store_true", help="no regional compile on the GPU")
    parser.add_argument("--rank-run", choices=FAMILIES, help=argparse.SUPPRESS)
    parser.add_argument("--row-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--extra-until", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_run:
        rank_main(args)
        return
    unknown = [f for f in args.families if f not in FAMILIES]
    if unknown or not args.families:
        parser.error(f"name families among {', '.join(FAMILIES)} (got {', '.join(args.families) or 'none'})")
    problems = batch_problems(args.batches)
    if problems:
        parser.error("--batches: " + "; ".join(problems))
    drive(args)


def batch_problems(batches: str) -> list[str]:
    """Why the comma-separated global batch sizes cannot be timed with 1 and 2 ranks (empty: they
    can): each must be a positive integer that divides by the 2 ranks."""
    from lorastudio.training.parallel_rules import data_parallel_problems

    problems = []
    for raw in batches.split(","):
        if not raw.strip().isdigit() or int(raw) < 1:
            problems.append(f"{raw!r} is not a positive integer")
            continue
        problems += [str(p) for p in data_parallel_problems(2, int(raw), 0.0)]
    return problems


if __name__ == "__main__":
    main()
