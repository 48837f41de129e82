"""Step pace around sample rounds (RESULTS note 30's lead: the CLI run's steps were ~10 % slower
after its first sample round). One FLUX.1 run through the product's train() with a sample round
every `--every` steps, each step's Progress event timed, and around each round: Dynamo's counters
(graphs, recompiles, guard failures), the caching allocator's state (segments, reserved,
inactive split bytes, cudaMalloc retries) and the card's clocks / temperature / power
(nvidia-smi). `--empty-cache` frees the allocator's cached blocks after each round (the lever if
the allocator's state is the cause); `--checkpoints` writes a checkpoint with each round, as the
e2e runs did (session 22 on an H100: no slowdown after rounds without checkpoints, FLUX.1 and
FLUX.2 klein; the e2e runs, which checkpoint with their rounds, showed one; RESULTS note 31).
Every step where Dynamo's graph or recompile count changes is listed (`compiles_at`).

usage (device, LORASTUDIO_HOME set, ROOT/flux built by bench.e2e_run build):
    python -m bench.sample_rounds ROOT [--steps 200] [--every 40] [--empty-cache] [--out DIR]
Prints one JSON row: s/step (median) per interval between rounds, and the state around each round.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from bench import e2e_build
from bench.e2e_forecast import config


def _smi() -> dict[str, str]:
    """The card's SM clock, temperature and power now (empty when nvidia-smi is absent)."""
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=clocks.sm,temperature.gpu,power.draw,clocks_throttle_reasons.active",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return {}
    parts = [p.strip() for p in out.split(",")]
    return dict(zip(("sm_clock", "temp", "power", "throttle"), parts, strict=False))


def _state() -> dict[str, Any]:
    """Dynamo's counters and the allocator's state at this moment."""
    import torch
    from torch._dynamo.utils import counters

    stats = torch.cuda.memory_stats() if torch.cuda.is_available() else {}
    return {
        "t": time.perf_counter(),
        "unique_graphs": counters["stats"].get("unique_graphs", 0),
        "frames_total": counters["frames"].get("total", 0),
        "frames_ok": counters["frames"].get("ok", 0),
        "recompiles": sum(counters["recompiles"].values()),
        "guard_failures": sum(
            len(v) if isinstance(v, list) else 1 for v in counters["guard_failures"].values()
        ),
        "segments": stats.get("segment.all.current", 0),
        "reserved_gib": round(stats.get("reserved_bytes.all.current", 0) / 2**30, 2),
        "inactive_split_gib": round(stats.get("inactive_split_bytes.all.current", 0) / 2**30, 2),
        "alloc_retries": stats.get("num_alloc_retries", 0),
        "device_allocs": stats.get("num_device_alloc", 0),
        **_smi(),
    }


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _tag(empty_cache: bool, checkpoints: bool) -> str:
    return ("ec" if empty_cache else "plain") + ("-ckpt" if checkpoints else "")


def run(
    root: Path,
    steps: int,
    every: int,
    empty_cache: bool,
    resolution: int = 1024,
    attention: str = "cudnn",
    family: str = "flux",
    checkpoints: bool = False,
) -> dict[str, Any]:
    """One run; returns per-interval pace and the state around each round."""
    import torch

    from lorastudio.jobs.validation import validate_run
    from lorastudio.settings import get_settings
    from lorastudio.training import samples
    from lorastudio.training.events import Progress
    from lorastudio.training.loop import train

    rounds: list[dict[str, Any]] = []
    render = samples.SamplePreviews.render

    def timed_render(self: Any, denoiser: Any, step: int, vae: Any = None) -> list[str]:
        _sync()
        before = _state()
        try:
            return render(self, denoiser, step, vae)
        finally:
            _sync()
            if empty_cache:
                torch.cuda.empty_cache()
            rounds.append({"step": step, "before": before, "after": _state()})

    samples.SamplePreviews.render = timed_render  # type: ignore[method-assign]
    settings = get_settings().ensure_dirs()
    cfg = config(root, f"sample-rounds-{_tag(empty_cache, checkpoints)}", steps, attention, resolution)
    cfg.update(sample_every=every, save_every=every if checkpoints else steps, family=family)
    cfg["base_model"] = str(e2e_build.pipeline_dir(root, family).resolve())
    prepared = validate_run(cfg, settings, live_output_names=set(), allow_outside_root=True)
    times: dict[int, float] = {}
    from torch._dynamo.utils import counters

    seen: list[tuple[int, int, int]] = [(0, 0, 0)]  # (step, unique graphs, recompiles) at each change

    def emit(event: Any) -> None:
        if isinstance(event, Progress):
            times[event.step] = time.perf_counter()
            now = (counters["stats"].get("unique_graphs", 0), sum(counters["recompiles"].values()))
            if now != seen[-1][1:]:
                seen.append((event.step, *now))

    t0 = time.perf_counter()
    train(prepared.worker_config, emit, settings=settings)
    wall = time.perf_counter() - t0
    round_steps = {r["step"] for r in rounds}
    deltas = {s: times[s] - times[s - 1] for s in times if s - 1 in times}
    intervals = []
    edges = [1, *sorted(round_steps), steps]
    for lo, hi in zip(edges, edges[1:], strict=False):
        # a step's Progress comes one step late in the pipelined loop: leave out the two steps
        # on each side of a round (its time lands in one of them)
        inside = [deltas[s] for s in range(lo + 3, hi - 1) if s in deltas]
        if inside:
            intervals.append(
                {
                    "steps": f"{lo}-{hi}",
                    "n": len(inside),
                    "median_s": round(statistics.median(inside), 4),
                    "mean_s": round(statistics.fmean(inside), 4),
                    "first5_s": [round(deltas[s], 4) for s in range(lo + 3, lo + 8) if s in deltas],
                }
            )
    for r in rounds:
        r["seconds"] = round(r["after"]["t"] - r["before"]["t"], 2)
        r["before"].pop("t"), r["after"].pop("t")
    return {
        "empty_cache": empty_cache,
        "checkpoints": checkpoints,
        "compiles_at": seen[1:],
        "wall_s": round(wall, 1),
        "intervals": intervals,
        "rounds": rounds,
        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1)
        if torch.cuda.is_available()
        else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--every", type=int, default=40)
    parser.add_argument("--empty-cache", action="store_true")
    parser.add_argument("--checkpoints", action="store_true")
    parser.add_argument("--resolution", type=int, default=1024)
    parser.add_argument("--attention", default="cudnn")
    parser.add_argument("--family", default="flux")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    row = run(
        args.root,
        args.steps,
        args.every,
        args.empty_cache,
        args.resolution,
        args.attention,
        args.family,
        args.checkpoints,
    )
    text = json.dumps(row)
    print("ROW " + text, flush=True)
    if args.out:
        name = f"sample-rounds-{_tag(args.empty_cache, args.checkpoints)}.json"
        (args.out / name).write_text(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
