"""The first step's Dynamo seconds with and without Dynamo's saved output (training/speed/precompile.py).

Each run is a fresh process on one Inductor cache folder, in this order: `off` (cold: fills
Inductor's and AOTAutograd's caches), `off` (warm: the baseline, Dynamo traces), `on` (traces
with aot_compile and saves), `on` twice more (loads), `off` again (the baseline's spread). Per
run: the first step's seconds, Dynamo's own (`_compile.compile_inner`, of which
`bytecode_tracing`; `fullgraph_capture` for a saved function's trace), the saved functions'
counters and load seconds, and the first loss (the same in every run).

  CPU, tiny FLUX.1 (compile forced on the CPU, as the unit tests do):
    python -m bench.precompile_first_step tiny /tmp/pcb --backend aot_eager   (or inductor)
  (torch 2.11 saves Inductor's output only: there the aot_eager "on" runs compile as "off" does)
  GPU, the real-size FLUX.1 of bench.e2e_run (build it first: `python -m bench.e2e_run build
  ROOT --family flux --place disk`), the CLI path, 2 steps per run:
    python -m bench.precompile_first_step e2e ROOT --family flux --out $OUT
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ORDER = [
    ("off-cold", "0"),
    ("off", "0"),
    ("on-save", "1"),
    ("on-load", "1"),
    ("on-load2", "1"),
    ("off2", "0"),
]
REPORT = re.compile(r"first step ([\d.]+) s; compile so far in this process: (.*)")


def tiny_child(backend: str) -> dict[str, Any]:
    """One compiled step of the tiny FLUX.1 with LoRA in this process (the unit tests' case)."""
    t0 = time.perf_counter()
    import torch

    from lorastudio import families
    from lorastudio.config import TrainConfig
    from lorastudio.tiny.models import build
    from lorastudio.training.adapters.lora import add_lora, lora_config_for
    from lorastudio.training.noise import make_objective
    from lorastudio.training.speed.compile import compile_denoiser
    from lorastudio.training.speed.first_step_report import first_step_compile_summary
    from lorastudio.training.step import forward_backward

    family = families.get("flux")
    pipe = build("flux", 0)
    cfg = TrainConfig(family="flux", base_model="tiny", data_dir="tiny", lora_rank=4, lora_alpha=4.0)
    objective = make_objective(family, cfg, dict(pipe.scheduler.config))
    denoiser = pipe.transformer.train()
    torch.manual_seed(0)
    params = add_lora(denoiser, lora_config_for(cfg, family.spec.lora_targets))
    g = torch.Generator().manual_seed(3)
    latents = torch.randn(1, 16, 8, 8, generator=g)  # [B, C, h, w]
    cond = {
        "prompt_embeds": torch.randn(1, 6, denoiser.config.joint_attention_dim, generator=g),  # [B, L, D]
        "pooled": torch.randn(1, denoiser.config.pooled_projection_dim, generator=g),  # [B, Dp]
    }
    info = {"original_size": [(64, 64)], "crop_top_left": [(0, 0)], "target_size": (64, 64)}
    compile_denoiser(denoiser, params, backend=backend)
    setup_s = time.perf_counter() - t0
    start = time.perf_counter()
    share = forward_backward(
        family, denoiser, objective, latents, cond, info, cfg, torch.Generator().manual_seed(5), 1,
        torch.amp.GradScaler("cpu", enabled=False),
    )  # fmt: skip
    return {
        "setup_s": round(setup_s, 2),
        "first_step_s": round(time.perf_counter() - start, 3),
        "loss": float(share),
        "report": first_step_compile_summary() or {},
    }


def _run_tiny(root: Path, backend: str, order: list[tuple[str, str]]) -> list[dict[str, Any]]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor")}
    rows = []
    for name, flag in order:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.precompile_first_step",
                "tiny-child",
                str(root),
                "--backend",
                backend,
            ],
            env={**env, "LORASTUDIO_PRECOMPILE": flag},
            capture_output=True,
            text=True,
            check=False,
        )
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        row = json.loads(lines[-1]) if lines else {"error": out.stderr[-2000:]}
        rows.append({"run": name, **row})
        _print_row(rows[-1])
    return rows


def _run_e2e(
    root: Path, family: str, steps: int, extra: list[str], per_run_s: float, order: list[tuple[str, str]]
) -> list[dict[str, Any]]:
    rows = []
    for name, flag in order:
        tag = f"pc-{name}"
        cmd = [sys.executable, "-m", "bench.e2e_run", "run", str(root), "--family", family, "--mode", "cli"]
        cmd += ["--tag", tag, "--steps", str(steps), *extra]
        try:
            out = subprocess.run(
                cmd,
                env={**os.environ, "LORASTUDIO_PRECOMPILE": flag},
                capture_output=True,
                text=True,
                check=False,
                timeout=per_run_s,
            )
        except subprocess.TimeoutExpired as err:
            rows.append({"run": name, "error": f"over {per_run_s} s: {str(err.stdout or '')[-1500:]}"})
            _print_row(rows[-1])
            continue
        path = root / f"e2e-{family}-{tag}.json"
        if out.returncode != 0 or not path.is_file():
            rows.append({"run": name, "error": (out.stderr or out.stdout)[-2000:]})
            _print_row(rows[-1])
            continue
        data = json.loads(path.read_text())
        report: dict[str, Any] = {}
        for line in data.get("attention_log", []):
            found = REPORT.search(line)
            if found:
                report = dict(_pair(p) for p in found.group(2).split(", "))
        rows.append(
            {
                "run": name,
                "first_step_s": data.get("first_step_s"),
                "time_to_first_step_s": data.get("time_to_first_step_s"),
                "weights_load_total_s": data.get("weights_load_total_s"),
                "ttfs_over_load": data.get("ttfs_over_load"),
                "s_per_step_after_first": data.get("s_per_step_after_first"),
                "peak_vram_gib": data.get("peak_vram_gib"),
                "loss": data.get("final_loss"),
                "report": report,
            }
        )
        _print_row(rows[-1])
    return rows


def _pair(text: str) -> tuple[str, float]:
    name, _, value = text.rpartition(" ")
    try:
        return name, float(value)
    except ValueError:
        return text, float("nan")


def _print_row(row: dict[str, Any]) -> None:
    if "error" in row:
        print(f"{row['run']:9s} ERROR {row['error'][-600:]}", flush=True)
        return
    rep = row.get("report", {})

    def metric(suffix: str) -> float:
        return sum(v for k, v in rep.items() if k.endswith(suffix))

    print(
        f"{row['run']:9s} first step {row.get('first_step_s')} s | Dynamo compile_inner {metric('_compile.compile_inner'):.2f} s"
        f" (bytecode_tracing {metric('bytecode_tracing'):.2f}) fullgraph_capture {metric('fullgraph_capture'):.2f} s"
        f" | saved: hit {rep.get('precompile.hit', 0):g} saved {rep.get('precompile.saved', 0):g}"
        f" fallback {rep.get('precompile.fallback', 0):g} load {rep.get('precompile.load_s', 0):.2f} s"
        f" | loss {row.get('loss')}"
        + (
            f" | to first step {row['time_to_first_step_s']} s ({row.get('ttfs_over_load')}x the load)"
            f" s/step after {row.get('s_per_step_after_first')} peak VRAM {row.get('peak_vram_gib')} GiB"
            if row.get("time_to_first_step_s")
            else ""
        ),
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.precompile_first_step", description=__doc__.split("\n")[0]
    )
    p.add_argument("what", choices=["tiny", "e2e", "tiny-child"])
    p.add_argument("root", type=Path)
    p.add_argument("--backend", default="aot_eager", help="tiny: the torch.compile backend")
    p.add_argument("--family", default="flux")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--attention", default=None, help="e2e: attention_backend of the runs")
    p.add_argument("--runs", default=None, help="a subset of the runs, comma-separated, in ORDER's order")
    p.add_argument("--per-run-s", type=float, default=200.0, help="e2e: one run's time limit")
    p.add_argument("--tiny", action="store_true", help="e2e: bench.e2e_run's --tiny (CPU: eager)")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON results here")
    args = p.parse_args(argv)
    if args.what == "tiny-child":
        print(json.dumps(tiny_child(args.backend)), flush=True)
        return 0
    args.root.mkdir(parents=True, exist_ok=True)
    wanted = args.runs.split(",") if args.runs else [name for name, _ in ORDER]
    order = [(name, flag) for name, flag in ORDER if name in wanted]
    if args.what == "tiny":
        if "off-cold" in wanted:  # the first run is the cold one
            shutil.rmtree(args.root / "inductor", ignore_errors=True)
        rows = _run_tiny(args.root, args.backend, order)
    else:
        from bench import e2e_build

        if "off-cold" in wanted:  # the first run is the cold one
            shutil.rmtree(e2e_build.home_dir(args.root) / "cache", ignore_errors=True)
        extra = ["--attention", args.attention] if args.attention else []
        extra += ["--tiny"] if args.tiny else []  # the plumbing on the CPU (no compile there)
        rows = _run_e2e(args.root, args.family, args.steps, extra, args.per_run_s, order)
    result = {"what": args.what, "backend": args.backend, "rows": rows}
    for folder in (args.root, args.out):
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"precompile-{args.what}.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
