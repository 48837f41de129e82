"""GPU benchmark of memory plans: the full-size denoisers built through the engine's own build
path (training.planning.plan_build.build_denoiser: load -> swap set -> quantise/fp8 -> LoRA -> block swap
-> compile -> checkpointing), then the engine's step (forward_backward, clip, fused AdamW, one
host read per step), timed with CUDA events. One (family, plan) per subprocess.

The "load" hands build_denoiser a random-init model (weights do not change the cost) built on the
GPU and moved to where the plan loads it (the CPU for quantised or swapped plans), so the
measured peak is the run's: the device never holds the whole bf16 model in those plans.

usage: PYTHONPATH=src:. python -m bench.bench_plans --out DIR --deadline-s S \
           flux:nf4/full/0/1 zimage:nf4/full/0/1 ...      (precision/checkpointing/offload/micro)
       add "+c" to compile the blocks (e.g. flux:nf4/full/0/1+c).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench.harness import append_row, child_main, engine_config, loop_step, run_isolated

GIB = 2**30


def one_plan(family: str, spec: str) -> dict[str, Any]:
    import torch

    from bench.bench_step import DEV, SCHEDULERS, timed
    from bench.models import build_denoiser, synthetic_batch
    from lorastudio.training.noise import make_objective
    from lorastudio.training.planning.plan import Plan
    from lorastudio.training.planning.plan_build import build_denoiser as build_for_plan
    from lorastudio.training.precision import pick_dtype, run_numerics

    compile_blocks = spec.endswith("+c")
    precision, ckpt, offload, micro = spec.removesuffix("+c").split("/")
    plan = Plan(precision, ckpt, int(offload), int(micro))
    row: dict[str, Any] = {"family": family, "plan": spec}
    device = torch.device(DEV)
    dtype = pick_dtype(plan.base_precision, device)
    eng_cfg = engine_config(family)
    from lorastudio import families

    fam = families.get(eng_cfg.family)

    def load_denoiser(base: str, revision: str | None, load_dtype: torch.dtype, load_device: Any) -> Any:
        model = build_denoiser(family, DEV, load_dtype)
        fam.adapt_denoiser(model)  # as the family's load_denoiser does
        if torch.device(load_device).type == "cuda":
            return model
        model = model.to(load_device)
        torch.cuda.empty_cache()  # the random init's device copy is gone, as if loaded from disk
        torch.cuda.reset_peak_memory_stats()
        return model

    proxy_family = SimpleNamespace(spec=fam.spec, load_denoiser=load_denoiser)
    with run_numerics(True, device):
        t0 = time.monotonic()
        built = build_for_plan(SimpleNamespace(cfg=eng_cfg, family=proxy_family, device=device), plan,
                               compile_blocks=compile_blocks)  # fmt: skip
        torch.cuda.synchronize()
        row["build_s"] = round(time.monotonic() - t0, 1)
        row["build_peak_gib"] = round(torch.cuda.max_memory_allocated() / GIB, 2)
        row["fallbacks"] = built.fallbacks
        row["compiled"] = built.compiled
        objective = make_objective(fam, eng_cfg, SCHEDULERS[family])
        losses: list[float] = []
        data = synthetic_batch(family, plan.micro_batch_size, 1024, DEV, dtype)
        step = loop_step(fam, built.denoiser, objective, eng_cfg, built.params, data, losses)

        t1 = time.monotonic()
        step()
        torch.cuda.synchronize()
        row["first_step_s"] = round(time.monotonic() - t1, 1)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        result = timed(step, plan.micro_batch_size, warm=1, windows=2, steps=3)
        row.update(result)
        row["peak_gib"] = round(torch.cuda.max_memory_allocated() / GIB, 2)
        row["reserved_gib"] = round(torch.cuda.max_memory_reserved() / GIB, 2)
        row["losses"] = [round(x, 4) for x in losses[:4]]
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="+", help="family:precision/checkpointing/offload/micro[+c]")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--deadline-s", type=float, default=540.0)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        fam, spec = args.one.split(":")
        child_main(args.one, lambda _: one_plan(fam, spec), {"family": fam, "plan": spec})
        return
    args.out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.deadline_s
    for case in args.cases:
        fam, spec = case.split(":")
        row = run_isolated("bench.bench_plans", case, {"family": fam, "plan": spec}, deadline, 40)
        append_row(args.out, "plans.jsonl", row)


if __name__ == "__main__":
    main()
