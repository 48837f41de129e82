"""End-to-end runs at real size through the product (issue 31 item 1), timed per phase.

    build DIR --family flux|qwen-image|flux2-klein|z-image|sdxl [--tiny] [--place auto|shm|disk]
        a random-weight pipeline folder of the released configs (bench/e2e_build.py; built on
        the GPU in bf16, components saved in parallel) and its dataset under DIR/home/datasets.
        Before building, the free space of DIR's disk, /dev/shm and host RAM decide where the
        folder and the studio home go (bench/e2e_place.py: /dev/shm first when it and the run's
        RAM fit, DIR/<family> and DIR/home then link there); a build that fits nowhere is refused
        with needed vs free (exit 3, the JSON says "refused"). Folders: FLUX.1 33.7 GB,
        Qwen-Image 57.7 GB, FLUX.2 [klein] 9B 34.7 GB.
    run DIR --family F --mode cli|api --steps N [--tiny] [--cold]
        cli: `lorastudio train`'s path (the weight prefetch, the CLI's config loader, then
        training.loop.train with an event sink instead of the console display), in this process.
        api: `lorastudio serve` as a subprocess on a free port, the same config POSTed to
        /api/train/start, its event stream followed to the end (bench/e2e_api.py).
        Both: the studio home DIR/home (its caches: Inductor's, the attention probe's, FA4's),
        1024 px (tiny: 32), batch 1, the engine's defaults (compile, attention auto), a sample
        round and a checkpoint every SAVE_EVERY steps; --cold empties DIR/home/cache first.
        Writes DIR/e2e-<family>-<mode>.json: the phase table (bench/e2e_phases.py) from the run's
        events, peak VRAM and host RAM.
    suite DIR --family F --steps N --deadline-s S [--tiny] [--modes cli,api]
        build (unless the folder is there) + each mode in its own process, skipping (and saying
        so) what would not fit in the deadline; writes DIR/e2e-<family>-suite.json with the job
        service's overhead (API wall vs CLI wall for the same steps, bench/e2e_phases.overhead)
        and, under "df", the filesystems of DIR, the pipeline and /dev/shm and the host RAM
        available before and after each part (also printed).

--tiny: lorastudio.tiny's pipeline and sample dataset on the CPU (a few steps): what the tests run
before GPU time is spent. See RESULTS.md note 23 and the report of issue 31 for the commands.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import e2e_build, e2e_place
from bench.e2e_phases import overhead, phase_table, timeline
from lorastudio.errors import NoSpaceLeft

REPO = Path(__file__).resolve().parents[1]  # bench/ is importable from here (the suite's children)
SAVE_EVERY = 100  # steps between sample rounds and checkpoints (and the export at the end)
# rough seconds of each step of a suite on an H200 (FLUX.1: RESULTS note 23), to skip what will not fit
# (FLUX.2 [klein] 9B: not measured yet, scaled from FLUX.1 by its parameters, CFG samples x2)
# seconds per family: build, cold start (load, caching, probe, compile), warm start, step (samples and
# checkpoints included); z-image and sdxl scaled from FLUX.1 by their parameters
_ROUGH = {"flux": (90, 110, 70, 0.45), "qwen-image": (150, 150, 100, 0.6), "flux2-klein": (90, 110, 70, 0.45)}
_ROUGH |= {"z-image": (60, 100, 60, 0.35), "sdxl": (30, 90, 50, 0.15)}
BUILD_S, START_S, START_WARM_S, STEP_S = ({f: float(v[i]) for f, v in _ROUGH.items()} for i in range(4))
TINY_S = 60.0  # any tiny phase on a CPU


def train_config(root: Path, family: str, tag: str, steps: int, tiny: bool, attention: str) -> dict[str, Any]:
    """The run's config (the same for both modes but its output name)."""
    every = min(SAVE_EVERY, max(1, steps // 2))
    return {
        "family": family,
        "base_model": str(e2e_build.pipeline_dir(root, family).resolve()),
        "data_dir": str(e2e_build.dataset_dir(root).resolve()),
        "output_name": f"e2e-{family}-{tag}",
        "resolution": 32 if tiny else 1024,
        "batch_size": 1,
        "steps": steps,
        "lora_rank": 4 if tiny else 16,
        "learning_rate": 1e-4,
        "save_every": every,
        "sample_every": every,
        "sample_prompts": ["a test pattern, waves and colours"],
        "sample_steps": 2 if tiny else 20,
        "attention_backend": attention,
        "latent_cache": os.environ.get("E2E_LATENT_CACHE", "auto"),  # "disk": the 2nd run reuses the 1st's
    }


def _fresh_output(root: Path, name: str) -> None:
    """The bench owns DIR/home: a previous run's output folder of this name goes."""
    shutil.rmtree(e2e_build.home_dir(root) / "outputs" / name, ignore_errors=True)


class Recorder:
    """The CLI mode's event sink: every event with its time since `t0` (seconds)."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.events: list[tuple[float, Any]] = []

    def __call__(self, event: Any) -> None:
        self.events.append((time.monotonic() - self.t0, event))
        if event.type != "progress" or event.step in (1, 2) or event.step % 50 == 0:
            data = event.model_dump()
            data.pop("type", None)
            data.pop("trials", None)
            brief = json.dumps(data, default=str)[:240]
            print(f"{self.events[-1][0]:8.1f} s  {event.type} {brief}", flush=True)


def timed_calls(module: Any, name: str, log: list[float]) -> None:
    """Wrap module.name so that each call's seconds go to `log` (bench instrumentation only)."""
    real = getattr(module, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.monotonic()
        try:
            return real(*args, **kwargs)
        finally:
            log.append(time.monotonic() - t)

    setattr(module, name, wrapper)


_LOGGED = (
    "lorastudio.training.speed.attention",
    "lorastudio.training.planning.plan_build",
    "lorastudio.training.speed.compile",
    "lorastudio.training.speed.first_step_report",
    "lorastudio.training.speed.precompile",  # Dynamo's saved block graphs: loaded, saved, refused
    "lorastudio.training.speed.denoiser_early",
)


class AttentionLog(logging.Handler):
    """The engine's attention log records (probe started / cached / timed / chosen), its
    denoiser build's stage times and the compile's (the first step's report), with their time
    since `t0` (none has an event of its own); printed as they come too."""

    def __init__(self, t0: float) -> None:
        super().__init__(logging.INFO)
        self.t0 = t0
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith(_LOGGED):
            self.lines.append(f"{time.monotonic() - self.t0:.1f} s {record.getMessage()}")
            print(f"{self.lines[-1]}", flush=True)


def compile_counters() -> dict[str, Any]:
    """Dynamo's counters of this process's compiles: Inductor's FX graph cache and AOTAutograd's
    cache hits and misses (did a warm run's compile come from the cache?), unique graphs."""
    from torch._dynamo.utils import counters

    wanted = {
        "inductor": ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass"),
        "aot_autograd": ("autograd_cache_hit", "autograd_cache_miss", "autograd_cache_bypass"),
        "stats": ("unique_graphs", "calls_captured"),
    }
    return {
        f"{group}.{k}": counters[group][k]
        for group, keys in wanted.items()
        for k in keys
        if counters[group][k]
    }


def run_cli(root: Path, cfg: dict[str, Any], device: str, t0: float) -> dict[str, Any]:
    """The CLI's path in this process; t0: this process's start (before torch was imported). The
    weight prefetch starts first, as `lorastudio train` starts it (jobs/prefetch.py)."""
    from lorastudio.jobs.prefetch import start_prefetch
    from lorastudio.settings import get_settings

    prefetch = start_prefetch(cfg, get_settings())
    import torch

    from lorastudio.cli.config_file import load_config_file
    from lorastudio.config import parse_train_config
    from lorastudio.training import loop, optimize

    path = root / f"train-{cfg['output_name']}.json"
    path.write_text(json.dumps(cfg, indent=1))
    config = parse_train_config(load_config_file(path))
    save_s: list[float] = []
    timed_calls(optimize, "save_checkpoint", save_s)
    rec = Recorder(t0)
    notes = AttentionLog(t0)
    logging.getLogger().addHandler(notes)
    logging.getLogger().setLevel(logging.INFO)
    from bench.rss_kinds import RssKinds

    rss = RssKinds()
    try:
        loop.train(config, prefetch.wrap(rec) if prefetch is not None else rec, device=device)
    finally:
        if prefetch is not None:
            prefetch.stop()
    table = phase_table(rec.events, time.monotonic() - t0)
    table.update(rss.stop())
    table["timeline"] = timeline(rec.events)
    table["attention_log"] = notes.lines
    table["compile_caches"] = compile_counters()
    table["checkpoint_write_s"] = [round(s, 2) for s in save_s]
    cuda = device.startswith("cuda")
    table["peak_vram_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 1) if cuda else None
    table["peak_host_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    return table


def run_api(root: Path, cfg: dict[str, Any], device: str, t0: float) -> dict[str, Any]:
    """The same config through `lorastudio serve`'s runs API (bench/e2e_api.py)."""
    from bench.e2e_api import api_run, gpu_processes, wait_for_standby

    if device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the worker trains where the server finds a device
    log = root / f"serve-{cfg['output_name']}.log"
    notes: dict[str, Any] = {}

    def standby(pid: int) -> None:  # as on a server up for a while: its standby worker is ready
        notes["standby_ready_after_s"] = wait_for_standby(log)
        notes["gpu_processes_while_waiting"] = gpu_processes()  # the standby holds no CUDA context
        notes["server_pid"] = pid

    events, wall, job = api_run(e2e_build.home_dir(root), cfg, log, before_post=standby, notes=notes)
    table = phase_table(events, wall)
    table["timeline"] = timeline(events)
    table["job_id"] = job
    table["api_notes"] = notes
    table["peak_host_rss_gib"] = round(  # the largest of the server and its worker (reaped)
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20, 2
    )
    table["server_log"] = str(log)
    worker_log = e2e_build.home_dir(root) / "logs" / f"{job}.log"  # the worker's INFO records
    table["worker_log"] = str(worker_log)
    if worker_log.is_file():
        table["attention_log"] = [
            line.strip()
            for line in worker_log.read_text(errors="replace").splitlines()
            if "training.speed.attention" in line or "denoiser build:" in line
        ]
    return table


def _write(root: Path, out: Path | None, name: str, data: dict[str, Any]) -> None:
    text = json.dumps(data, indent=1, default=str)
    for folder in {root, *([out] if out else [])}:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    print(json.dumps(data, default=str), flush=True)


def cmd_build(args: argparse.Namespace) -> dict[str, Any]:
    """The build; a refusal for want of room (NoSpaceLeft) comes back as {"refused": why}."""
    try:
        if args.tiny:
            return e2e_build.build_tiny(args.root, args.family, prefer=args.place or "disk")
        return e2e_build.build_real(args.root, args.family, prefer=args.place or "auto")
    except NoSpaceLeft as exc:
        return {"family": args.family, "tiny": args.tiny, "refused": str(exc)}


def disk_usage(root: Path, family: str) -> dict[str, Any]:
    """df of DIR, the pipeline's folder (DIR/<family>'s target) and /dev/shm, and the host RAM
    available (bench/e2e_place.usage)."""
    pipeline = e2e_build.pipeline_dir(root, family)
    return e2e_place.usage({"dir": root, "pipeline": pipeline.resolve(), "shm": e2e_place.SHM})


def cmd_run(args: argparse.Namespace, t0: float) -> dict[str, Any]:
    os.environ["LORASTUDIO_HOME"] = str(e2e_build.home_dir(args.root).resolve())
    if args.cold:
        shutil.rmtree(e2e_build.home_dir(args.root) / "cache", ignore_errors=True)
    cfg = train_config(args.root, args.family, args.tag or args.mode, args.steps, args.tiny, args.attention)
    _fresh_output(args.root, cfg["output_name"])
    device = args.device or ("cpu" if args.tiny else "cuda")
    table = (run_cli if args.mode == "cli" else run_api)(args.root, cfg, device, t0)
    tag = args.tag or args.mode
    for key in ("server_log", "worker_log"):  # the API run's logs travel with the results
        if args.out and table.get(key) and Path(table[key]).is_file():
            args.out.mkdir(parents=True, exist_ok=True)
            shutil.copy(table[key], args.out / f"{tag}-{Path(table[key]).name}")
    return {
        "family": args.family,
        "mode": args.mode,
        "tag": tag,
        "tiny": args.tiny,
        "cold": args.cold,
        **table,
    }


def _estimate(family: str, what: str, steps: int, tiny: bool, warm: bool) -> float:
    if tiny:
        return TINY_S
    if what == "build":
        return BUILD_S[family]
    return (START_WARM_S if warm else START_S)[family] + STEP_S[family] * steps


def cmd_suite(args: argparse.Namespace, t0: float) -> dict[str, Any]:
    """build + each mode as a child process of this module, within args.deadline_s."""
    deadline = t0 + args.deadline_s
    result: dict[str, Any] = {"family": args.family, "steps": args.steps, "tiny": args.tiny, "skipped": []}
    common = [str(args.root), "--family", args.family] + (["--tiny"] if args.tiny else [])
    common += ["--device", args.device] if args.device else []
    build = ["build", *common, *(["--place", args.place] if args.place else [])]
    plan: list[tuple[str, list[str]]] = []
    if not (e2e_build.pipeline_dir(args.root, args.family) / "model_index.json").is_file():
        plan.append(("build", build))
    seen: dict[str, int] = {}
    for mode in args.modes.split(","):
        seen[mode] = seen.get(mode, 0) + 1
        tag = mode if seen[mode] == 1 else f"{mode}{seen[mode]}"  # cli, api, cli2, ...
        run = ["run", *common, "--mode", mode, "--tag", tag, "--steps", str(args.steps)]
        plan.append((tag, run + ["--attention", args.attention] + (["--cold"] if args.cold else [])))
    result["df"] = {}
    warm = False  # a run of this suite ended: the next one finds the caches warm (unless --cold)
    for what, argv in plan:
        left = deadline - time.monotonic()
        need = _estimate(args.family, what, args.steps, args.tiny, warm and not args.cold)
        if need > left:
            result["skipped"].append(f"{what}: needs ~{need:.0f} s, {left:.0f} s left")
            continue
        name = f"e2e-{args.family}-{what}.json"
        (args.root / name).unlink(missing_ok=True)  # an earlier call's result is not this one's
        df = {"before": disk_usage(args.root, args.family)}
        print(f"df before {what}: {json.dumps(df['before'])}", flush=True)
        started = time.monotonic()
        cmd = [sys.executable, "-m", "bench.e2e_run", *argv, *(["--out", str(args.out)] if args.out else [])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        try:
            done = subprocess.run(cmd, timeout=max(1.0, left), check=False, env=env)
            code: int | str = done.returncode
        except subprocess.TimeoutExpired:
            code = "killed at the deadline"
        result[f"{what}_process_s"] = round(time.monotonic() - started, 1)
        df["after"] = disk_usage(args.root, args.family)
        result["df"][what] = df
        print(f"df after {what}: {json.dumps(df['after'])}", flush=True)
        if code != 0 or not (args.root / name).is_file():
            known = json.loads((args.root / name).read_text()) if (args.root / name).is_file() else {}
            result[what] = {"failed": code, **known}
            if what == "build":
                break
            continue
        result[what] = json.loads((args.root / name).read_text())
        warm = warm or what != "build"
    runs = {tag: r for tag, r in result.items() if isinstance(r, dict) and r.get("end") == "complete"}
    apis = [t for t in runs if runs[t]["mode"] == "api"]
    clis = [t for t in runs if runs[t]["mode"] == "cli"]
    if apis and clis:  # the API run against each CLI run (the first: cold, a later one: warm caches)
        result["overhead"] = {f"{a}_vs_{c}": overhead(runs[c], runs[a]) for a in apis for c in clis}
    return result


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.e2e_run", description=__doc__.split("\n")[0])
    p.add_argument("what", choices=["build", "run", "suite"])
    p.add_argument("root", type=Path)
    p.add_argument("--family", choices=e2e_build.FAMILIES, default="flux")
    p.add_argument("--tiny", action="store_true", help="lorastudio.tiny's pipeline on the CPU, a few steps")
    p.add_argument("--mode", choices=["cli", "api"], default="cli")
    p.add_argument(
        "--modes", default="cli,api", help="suite: the modes to run, in order (repeats: cli2, ...)"
    )
    p.add_argument("--tag", default=None, help="run: names its output and JSON (default: the mode)")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--device", default=None, help="default: cuda (cpu with --tiny)")
    p.add_argument("--attention", default="auto", help="attention_backend of the run")
    p.add_argument(
        "--place",
        choices=e2e_place.PLACES,
        default=None,
        help="build: where the pipeline goes (default: auto; disk with --tiny)",
    )
    p.add_argument("--cold", action="store_true", help="empty DIR/home/cache before each run")
    p.add_argument("--deadline-s", type=float, default=570.0)
    p.add_argument("--out", type=Path, default=None, help="also write the JSON results here")
    return p


def main(argv: list[str] | None = None) -> int:
    t0 = time.monotonic()
    args = parser().parse_args(argv)
    args.root.mkdir(parents=True, exist_ok=True)
    if args.what == "build":
        result = cmd_build(args)
        name = f"e2e-{args.family}-build.json"
        if "refused" in result:
            _write(args.root, args.out, name, result)
            print(f"build refused: {result['refused']}", file=sys.stderr, flush=True)
            return 3
    elif args.what == "run":
        result = cmd_run(args, t0)
        name = f"e2e-{args.family}-{args.tag or args.mode}.json"
    else:
        result = cmd_suite(args, t0)
        name = f"e2e-{args.family}-suite.json"
    _write(args.root, args.out, name, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
