"""The denoiser's load beside phases 1-2 (training/speed/denoiser_early.py) against the sequential load,
same call, same pipeline folder: the time to the first step and the loads (issue 31; RESULTS
note 44).

    python -m bench.denoiser_overlap DIR [--family flux] [--order old,new,old,new] [--steps 2]
                                         [--compile off] [--attention cudnn] [--tiny] [--out OUT]

builds DIR/<family> first when it is not there (`python -m bench.e2e_run build`: a random-weight
folder of the released config, FLUX.1 ~90 s on an H200), then runs each path of --order in a
process of its own (`one`): bench/e2e_run.run_cli's path (`lorastudio train`'s: the weight
prefetch, then training.loop.train in the process), 1024 px, batch 1, --steps steps, no sample
rounds nor checkpoints, compile per --compile (default off: the first step's Dynamo trace,
3.3-4.3 s of FLUX.1's, is not this change's and a cold Inductor cache would load the first run
only), attention per --attention (default cudnn: auto's probe would load the first run only).
Repeated paths are tagged by their place (old, new, old2, new3). "old" refuses the overlap (LORASTUDIO_EARLY_DENOISER=0),
"new" lets the engine decide (its refusal, if any, is printed). Each run prints and writes
DIR/overlap-<family>-<path>.json: the time to the first step, the loads (each ModelLoadCompleted's
seconds; the denoiser's waited_s where it overlapped), bench/e2e_phases' phase table, the peak
VRAM and the process's peak host RSS; the parent writes DIR/overlap-<family>.json with both and
the differences. Imports nothing of torch in the parent (a CPU host can import and --tiny it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PATHS = ("old", "new")


def _config(
    root: Path, family: str, path: str, steps: int, tiny: bool, compile_mode: str, attention: str
) -> dict[str, Any]:
    from bench.e2e_run import train_config

    cfg = train_config(root, family, f"overlap-{path}", steps, tiny, attention)
    for key in ("sample_prompts", "sample_every", "sample_steps", "save_every"):
        cfg.pop(key)
    cfg["compile"] = compile_mode
    return cfg


def run_one(
    root: Path, family: str, path: str, steps: int, tiny: bool, compile_mode: str, attention: str, t0: float
) -> dict[str, Any]:
    """One run of `path` in this process (e2e_run.run_cli's path); its table."""
    from bench import e2e_build
    from bench.e2e_run import _fresh_output, run_cli

    os.environ["LORASTUDIO_HOME"] = str(e2e_build.home_dir(root).resolve())
    from lorastudio.training.speed import denoiser_early

    os.environ["LORASTUDIO_EARLY_DENOISER"] = "0" if path == "old" else "1"  # old: the sequential path
    if path != "old" and tiny:
        denoiser_early._ON_CPU = "device"  # the CPU's path of the overlap (an unpinned ring)
    cfg = _config(root, family, path, steps, tiny, compile_mode, attention)
    _fresh_output(root, cfg["output_name"])
    table = run_cli(root, cfg, "cpu" if tiny else "cuda", t0)
    loads = [
        line
        for line in table.get("attention_log", [])
        if "denoiser build:" in line or "denoiser load" in line
    ]
    return {
        "family": family,
        "path": path,
        "steps": steps,
        "compile": compile_mode,
        "build_log": loads,
        **table,
    }


KEYS = (
    "time_to_first_step_s",
    "weights_load_total_s",
    "weights_load_s",
    "weights_waited_s",
    "conditioning_s",
    "latents_s",
    "plan_and_probe_s",
    "first_step_s",
    "peak_vram_gib",
    "peak_host_rss_gib",
    "peak_RssAnon_gib",
    "peak_RssFile_gib",
    "end",
)


def summary(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each run's key figures (by tag: old, new, old2, new3...) and, with both paths, each
    path's times to the first step, the mean of new less the mean of old, and each path's mean
    over old's mean weights load (issue 31's ratio, against the sequential load)."""
    out: dict[str, Any] = {tag: {k: r.get(k) for k in KEYS if k in r} for tag, r in runs.items()}
    by_path: dict[str, list[float]] = {p: [] for p in PATHS}
    loads: list[float] = []
    for tag, r in runs.items():
        path = tag.rstrip("0123456789")
        if r.get("time_to_first_step_s") is not None and path in by_path:
            by_path[path].append(r["time_to_first_step_s"])
            if path == "old" and r.get("weights_load_total_s"):
                loads.append(r["weights_load_total_s"])
    out["ttfs_s"] = by_path
    if by_path["old"] and by_path["new"]:
        mean = {p: sum(v) / len(v) for p, v in by_path.items()}
        out["ttfs_new_less_old_s"] = round(mean["new"] - mean["old"], 2)
        load = sum(loads) / len(loads) if loads else None
        out["ttfs_over_old_load"] = {p: round(mean[p] / load, 2) if load else None for p in PATHS}
    return out


def main(argv: list[str] | None = None) -> int:
    t0 = time.monotonic()
    p = argparse.ArgumentParser(prog="python -m bench.denoiser_overlap", description=__doc__.split("\n")[0])
    p.add_argument(
        "what", nargs="?", choices=["one"], default=None, help="(internal) one run, in this process"
    )
    p.add_argument("root", type=Path)
    p.add_argument("--family", default="flux")
    p.add_argument(
        "--order", default="old,new,old,new", help="the paths, in order (old, new; repeats allowed)"
    )
    p.add_argument("--path", choices=PATHS, default="new", help="one: the path")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--compile", default="off", help="the runs' compile setting")
    p.add_argument(
        "--attention", default=None, help="attention_backend (default cudnn, auto with --tiny: no probe run)"
    )
    p.add_argument("--tiny", action="store_true", help="lorastudio.tiny's pipeline on the CPU")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON results here")
    args = p.parse_args(argv)
    args.attention = args.attention or ("auto" if args.tiny else "cudnn")
    root: Path = args.root
    root.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    if args.what == "one":
        result = run_one(
            root, args.family, args.path, args.steps, args.tiny, args.compile, args.attention, t0
        )
        name = f"overlap-{args.family}-{args.path}.json"
    else:
        if not (root / args.family / "model_index.json").is_file():
            build = [sys.executable, "-m", "bench.e2e_run", "build", str(root), "--family", args.family]
            subprocess.run(build + (["--tiny"] if args.tiny else []), check=True, env=env)
        runs: dict[str, dict[str, Any]] = {}
        for i, path in enumerate(args.order.split(",")):
            tag = path if path not in runs else f"{path}{i}"
            cmd = [sys.executable, "-m", "bench.denoiser_overlap", "one", str(root), "--family", args.family]
            cmd += ["--path", path, "--steps", str(args.steps), "--compile", args.compile]
            cmd += ["--attention", args.attention, *(["--tiny"] if args.tiny else [])]
            done = subprocess.run(cmd, check=False, env=env)
            file = root / f"overlap-{args.family}-{path}.json"
            runs[tag] = json.loads(file.read_text()) if done.returncode == 0 and file.is_file() else {}
            runs[tag]["returncode"] = done.returncode
            file.unlink(missing_ok=True)
            result = {"runs": runs, "summary": summary(runs)}
            name = f"overlap-{args.family}.json"
            _write([root, args.out], name, result)  # after each run: a call cut short keeps the runs done
        print(json.dumps(result["summary"], indent=1), flush=True)
    _write([root, args.out], name, result)
    return 0


def _write(folders: list[Path | None], name: str, result: dict[str, Any]) -> None:
    text = json.dumps(result, indent=1, default=str)
    for folder in {f for f in folders if f is not None}:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


if __name__ == "__main__":
    sys.exit(main())
