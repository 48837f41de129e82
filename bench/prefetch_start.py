"""Time to the first step with and without the weight prefetch (jobs/prefetch.py), through the
real `lorastudio train` in a fresh process each time, on a pipeline folder on a disk whose files
are dropped from the page cache before every run (issue 31 item 1: time to the first step
<= 1.2x the time to load the weights from disk; RESULTS note 27).

    python -m bench.prefetch_start build DIR [--double 2 --single 4 --t5-layers 2]
    python -m bench.prefetch_start run DIR [--family flux] [--device cpu] [--rounds 2] [--warmup 0] [--out OUT]

DIR has bench/e2e_build's layout (DIR/<family> the pipeline, DIR/home the studio home and its
dataset). `build` writes FLUX.1 at the released widths with fewer blocks (bf16, a few GB, built on
the CPU: bench/e2e_models.flux_pipeline) and e2e_build's test-pattern dataset; `run` also takes
the real-size folder that `python -m bench.e2e_run build` made, which must be on a disk, not
/dev/shm: a tmpfs keeps its pages, and a run whose files were still cached is refused.

A round: a cold read of the pipeline's weight files (the disk's own time for them, the floor of
any load), then `lorastudio train` with LORASTUDIO_PREFETCH_WEIGHTS=0, then =1, each after the
pipeline's files are dropped (posix_fadvise DONTNEED: no root needed; residency checked with
mincore). From each run's timing record (lorastudio/timings.py): start -> first weights read,
the weights load, start -> first step; polled from outside during the run: the share of the
weights in the page cache when the run began reading them (cached_at_first_read: what the
prefetch had warmed by then, whatever else the shared host's load did to the timings). Issue 31's ratio is start -> first step over the cold load
of the run without the prefetch (what "the time to load the weights from disk" is).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import e2e_build

POLL_S = 0.5  # how often the share of the weights in the page cache is read during a run
MAX_RESIDENT = 0.05  # share of the pipeline's bytes still cached after a drop that voids a run
# On the CPU: a step of seconds. The base stays fp32 (the CPU's default): in bf16 the CPU's
# caption encoding and latent cache took 36 s and 46 s and the step minutes. Its load is then
# mostly the CPU's upcast of every weight (the denoiser's 2.6 GB: 9 s, its disk read ~1.6 s).
CPU_OVERRIDES = {"resolution": 32, "max_sequence_length": 16}


def weight_files(folder: Path) -> list[Path]:
    """Every file under the pipeline folder (weights, configs, tokenizers), largest first."""
    return sorted((p for p in folder.rglob("*") if p.is_file()), key=lambda p: -p.stat().st_size)


def drop(paths: list[Path]) -> None:
    """Drop `paths` from the page cache (their pages are clean: nothing is written back)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mmap.restype = ctypes.c_void_p
_LIBC.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_LIBC.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def resident_bytes(path: Path) -> int:
    """Bytes of `path` in the page cache now (mincore over a read-only shared mapping)."""
    size = path.stat().st_size
    if size == 0:
        return 0
    page = mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _LIBC.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap of {path} failed")
        try:
            pages = (size + page - 1) // page
            vec = (ctypes.c_ubyte * pages)()
            if _LIBC.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore of {path} failed")
            return (pages - bytes(vec).count(0)) * page  # mincore sets bit 0 of a cached page
        finally:
            _LIBC.munmap(addr, size)
    finally:
        os.close(fd)


def resident_share(paths: list[Path]) -> float:
    total = sum(p.stat().st_size for p in paths)
    return sum(resident_bytes(p) for p in paths) / total if total else 0.0


def cold_read(paths: list[Path]) -> dict[str, Any]:
    """Drop, then read every file through once (jobs/prefetch.read_through): the disk's time."""
    from lorastudio.jobs.prefetch import read_through

    drop(paths)
    before = resident_share(paths)
    t = time.monotonic()
    count = sum(read_through(p, lambda: False) for p in paths)
    seconds = time.monotonic() - t
    return {"gb": round(count / 1e9, 2), "s": round(seconds, 2), "gb_per_s": round(count / 1e9 / seconds, 2),
            "resident_before": round(before, 3)}  # fmt: skip


def run_config(root: Path, family: str, device: str) -> dict[str, Any]:
    """One optimizer step, no sample round or checkpoint: e2e_run's config (tiny sizes on the CPU)."""
    from bench import e2e_run

    cfg = e2e_run.train_config(root, family, "prefetch", 1, device == "cpu", "auto")
    for key in ("sample_prompts", "sample_every", "sample_steps", "save_every"):
        cfg.pop(key, None)
    return cfg | (CPU_OVERRIDES if device == "cpu" else {})


def run_once(root: Path, family: str, device: str, prefetch: bool) -> dict[str, Any]:
    """`lorastudio train` in a fresh process after dropping the pipeline's files; its record."""
    cfg = run_config(root, family, device)
    path = root / "train-prefetch.json"
    path.write_text(json.dumps(cfg, indent=1))
    home = e2e_build.home_dir(root).resolve()
    files = weight_files(e2e_build.pipeline_dir(root, family).resolve())
    drop(files)
    resident = resident_share(files)
    if resident > MAX_RESIDENT:
        raise SystemExit(f"{resident:.0%} of the pipeline is still cached after the drop (a tmpfs?)")
    env = os.environ | {"LORASTUDIO_HOME": str(home), "LORASTUDIO_PREFETCH_WEIGHTS": str(int(prefetch))}
    command = [sys.executable, "-m", "lorastudio.cli", "train", str(path), "--device", device, "--overwrite"]
    t = time.monotonic()
    with tempfile.TemporaryFile("w+", encoding="utf-8") as log:
        child = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        cached = [(0.0, resident)]  # (seconds since the start, share of the weights in the cache)
        while child.poll() is None:
            time.sleep(POLL_S)
            cached.append((time.monotonic() - t, resident_share(files)))
        wall = time.monotonic() - t
        if child.returncode != 0:
            log.seek(0)
            raise SystemExit(f"the run failed ({child.returncode}):\n{log.read()[-4000:]}")
    record = json.loads(
        max((home / "run_timings").glob("*.json"), key=lambda p: p.stat().st_mtime).read_text()
    )
    load = record["phases"]["weights_load"]
    first_read = record["to_first_read_s"]
    return {
        "prefetch": prefetch,
        "resident_before": round(resident, 3),
        "to_first_read_s": first_read,
        # the share of the weights in the page cache when the run began reading them (polled)
        "cached_at_first_read": round(max((c for s, c in cached if s <= first_read), default=0.0), 3),
        "weights_load_s": load,
        "to_first_step_s": record["to_first_step_s"],
        "first_step_s": record["phases"]["first_step"],  # the step's own compute (and compile)
        "process_start_s": record["phases"]["process_start"],
        "wall_s": round(wall, 2),
    }


def cmd_build(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from bench.e2e_models import component_gb, flux_pipeline

    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    t = time.monotonic()
    pipe = flux_pipeline(args.double, args.single, args.t5_layers)
    torch.set_default_dtype(torch.float32)
    e2e_build.remove_build(args.root, "flux")
    result = e2e_build._build(args.root, "flux", pipe, component_gb(pipe), "disk", tiny=True)
    e2e_build.write_dataset(e2e_build.dataset_dir(args.root), images=4, side=64)
    return {"build_s": round(time.monotonic() - t, 1), **result}


def cmd_run(args: argparse.Namespace) -> dict[str, Any]:
    files = weight_files(e2e_build.pipeline_dir(args.root, args.family).resolve())
    for _ in range(args.warmup):  # fills the compile and attention-probe caches: not counted
        print(json.dumps({"warmup": run_once(args.root, args.family, args.device, True)}), flush=True)
    rounds = []
    for i in range(args.rounds):
        row = {"disk": cold_read(files)}
        for prefetch in (False, True):
            row["on" if prefetch else "off"] = run_once(args.root, args.family, args.device, prefetch)
        rounds.append(row)
        print(json.dumps({"round": i + 1, **row}), flush=True)

    def median(mode: str, key: str) -> float:
        return round(statistics.median(r[mode][key] for r in rounds), 2)

    cold_load = median("off", "weights_load_s")
    summary = {
        "pipeline_gb": round(sum(p.stat().st_size for p in files) / 1e9, 2),
        "disk_read_s": median("disk", "s"),
        "cold_load_s (off)": cold_load,
        **{f"{key} ({mode})": median(mode, key) for mode in ("off", "on") for key in
           ("process_start_s", "to_first_read_s", "cached_at_first_read", "weights_load_s", "first_step_s",
            "to_first_step_s")},
        "ratio_first_step_to_cold_load (off)": round(median("off", "to_first_step_s") / cold_load, 2),
        "ratio_first_step_to_cold_load (on)": round(median("on", "to_first_step_s") / cold_load, 2),
    }  # fmt: skip
    return {"rounds": rounds, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build")
    build.add_argument("root", type=Path)
    build.add_argument("--double", type=int, default=2)
    build.add_argument("--single", type=int, default=4)
    build.add_argument("--t5-layers", type=int, default=2)
    run = sub.add_parser("run")
    run.add_argument("root", type=Path)
    run.add_argument("--family", default="flux")
    run.add_argument("--device", default="cpu")
    run.add_argument("--rounds", type=int, default=2)
    run.add_argument("--warmup", type=int, default=0, help="uncounted runs first (CUDA: the compile cache)")
    for p in (build, run):
        p.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    result = cmd_build(args) if args.command == "build" else cmd_run(args)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"prefetch_start-{args.command}.json").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
