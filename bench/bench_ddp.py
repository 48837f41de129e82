"""Data-parallel benchmark: samples/s of the engine's step on 2 GPUs against 1 GPU, same run
(issue #9: >= 1.8x for FLUX.1 and Qwen-Image at 1024 px).

For each family the driver launches the engine's data-parallel step under torchrun twice: with 1
rank, then with 2 (`python -m torch.distributed.run --standalone --nproc-per-node N -m
bench.ddp_rank FAMILY ...`, bench/ddp_rank.py). Every rank builds the full-size random-init denoiser on
its own GPU (bench.models.build_denoiser), the family's default LoRA (training.adapters.lora) and the
regional compile (training.speed.compile); with 2 ranks the denoiser is wrapped in DDP by
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
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.ddp_rank import FAMILIES, FULL, TINY, Mode
from bench.harness import append_row

TARGET_RATIO = 1.8  # issue #9: 2-GPU samples/s >= 1.8x one GPU's
ROWS_FILE = "ddp.jsonl"
REPO = Path(__file__).resolve().parents[1]
# Never use NVLink multicast on the lent machines (KINDS.md): kept set for every launched rank.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


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
            "-m", "bench.ddp_rank", family, "--row-file", str(row_file),
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
    args = parser.parse_args()
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
