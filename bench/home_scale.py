"""A studio home after a year of use, through a real server (the session 34 home at scale audit).

Builds the home (bench/home_build.py: 2,000 runs, every 20th with 50 checkpoints and 200 samples,
20,000 gallery images, 300 datasets, a log per run), starts the server on it (bench/
dataset_scale.Bench: a free loopback port, no standby worker) and times what the screens ask:
the server's start (spawn to its first answer), the lists (runs, their pages, datasets, gallery,
LoRAs, models), a heavy run's page (its record, samples, checkpoints), each list asked by
`--clients` clients at once (p50 / p99 of `--rounds` rounds), and deleting a heavy run. The
server's RSS (VmRSS, VmHWM) is read after each step. Usage:

    PYTHONPATH=$PWD/src:$PWD python -m bench.home_scale [--runs 2000 --gallery 20000 ...]

Prints one JSON line per step: step, seconds (p50 / p99 for the concurrent ones), bytes, status,
rss_mb, peak_mb.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench.dataset_scale import Bench, _memory
from bench.home_build import Scale, build_home, output_name, run_id

LISTS = (
    ("runs (default page)", "/api/runs", {}),
    ("runs (limit 50)", "/api/runs", {"limit": 50}),
    ("datasets", "/api/datasets", {}),
    ("gallery (default page)", "/api/gallery", {}),
    ("loras", "/api/loras", {}),
    ("models", "/api/models", {}),
)


class HomeBench(Bench):
    """Bench with the server's own CPU seconds for each step (`server_cpu_s`, from /proc: what
    the request cost, whatever else the host runs; the wall time moves 3-5x on a loaded host)."""

    def __init__(self, home: Path) -> None:
        super().__init__(home)
        self._cpu_mark = 0.0  # the start's record: every CPU second since the spawn

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text(encoding="ascii").rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def mark(self) -> None:
        self._cpu_mark = self.cpu()

    def step(self, name: str, method: str, path: str, **kw: Any) -> httpx.Response:
        self.mark()
        return super().step(name, method, path, **kw)

    def record(self, name: str, seconds: float, size: int = 0, status: int = 0) -> None:
        rss, peak = _memory(self.proc.pid)
        row = {
            "step": name,
            "seconds": round(seconds, 3),
            "server_cpu_s": round(self.cpu() - self._cpu_mark, 3),
        }
        row |= {"bytes": size, "status": status, "rss_mb": round(rss), "peak_mb": round(peak)}
        self.rows.append(row)
        print(json.dumps(row), flush=True)


def concurrent(bench: HomeBench, name: str, path: str, params: dict, clients: int, rounds: int) -> None:
    """`clients` clients each asking `rounds` times at once; records p50 and p99 of the times."""

    def one(_: int) -> list[float]:
        times = []
        with httpx.Client(base_url=bench.url, timeout=600) as client:
            for _ in range(rounds):
                start = time.perf_counter()
                resp = client.get(path, params=params)
                times.append(time.perf_counter() - start)
                resp.raise_for_status()
        return times

    bench.mark()
    with ThreadPoolExecutor(clients) as pool:
        times = sorted(t for ts in pool.map(one, range(clients)) for t in ts)
    p99 = times[min(len(times) - 1, round(0.99 * (len(times) - 1)))]
    bench.record(f"{name} x{clients} clients p50 (cpu: all {clients * rounds})", statistics.median(times))
    bench.record(f"{name} x{clients} clients p99", p99)


def run(home: Path, scale: Scale, clients: int, rounds: int) -> list[dict[str, Any]]:
    start = time.perf_counter()
    counts = build_home(home, scale)
    print(json.dumps({"step": "build home", "seconds": round(time.perf_counter() - start, 1), **counts}))
    start = time.perf_counter()
    bench = HomeBench(home)
    bench.record("server start (spawn to first answer)", time.perf_counter() - start)
    try:
        for name, path, params in LISTS:
            bench.step(name, "GET", path, params=params)
        runs = bench.step("runs (limit 10000)", "GET", "/api/runs", params={"limit": 10_000})
        print(json.dumps({"runs listed": len(runs.json()["runs"])}))
        heavy = run_id(0)
        bench.step("heavy run record", "GET", f"/api/runs/{heavy}")
        bench.step(f"heavy run samples ({scale.samples})", "GET", f"/api/runs/{heavy}/samples")
        bench.step(f"heavy run checkpoints ({scale.checkpoints})", "GET", f"/api/runs/{heavy}/checkpoints")
        bench.step("heavy run loras", "GET", f"/api/runs/{heavy}/loras")
        for name, path, params in LISTS:
            concurrent(bench, name, path, params, clients, rounds)
        concurrent(bench, "heavy run samples", f"/api/runs/{heavy}/samples", {}, clients, rounds)
        victim = run_id(scale.heavy_every)  # another heavy run
        resp = bench.step(f"delete a heavy run ({output_name(scale.heavy_every)})", "DELETE",
                          f"/api/runs/{victim}")  # fmt: skip
        print(json.dumps({"delete answer": resp.json()}))
    finally:
        bench.close()
    return bench.rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = Scale()
    for field in ("runs", "heavy_every", "checkpoints", "samples", "gallery", "datasets", "dataset_images"):
        parser.add_argument(f"--{field.replace('_', '-')}", type=int, default=getattr(defaults, field))
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None, help="also write the rows as JSON here")
    args = parser.parse_args()
    scale = Scale(**{f: getattr(args, f) for f in ("runs", "heavy_every", "checkpoints", "samples",
                                                   "gallery", "datasets", "dataset_images")})  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="lorastudio-home-") as tmp:
        rows = run(Path(tmp) / "home", scale, args.clients, args.rounds)
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
