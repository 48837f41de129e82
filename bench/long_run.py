"""What a 100,000-step run costs the server a request (the session 35 long-run audit).

Builds a home with one long run, written in the studio's formats without training: its record
with one metric point a step (`--steps`), a validation round every `--validate-every` steps, its
folder with the samples of a round every `--sample-every` steps (`--prompts` each), the newest
`--keep-last` checkpoints and `--keep-loras` LoRA snapshots, and a full worker log (the current
file and its rotated part, 16 MB each). Then a real server (bench/dataset_scale.Bench: a free
loopback port, no standby worker) answers what a client of that run asks, each step timed with
the server's own CPU seconds (bench/home_scale.HomeBench): the run's page (record, samples,
checkpoints, LoRAs), `--images` sample images as a Samples view fetches them, the log, the
config, the status poll. Usage:

    PYTHONPATH=$PWD/src:$PWD python -m bench.long_run [--steps 100000 ...]

Prints one JSON line per step: step, seconds, server_cpu_s, bytes (the sample images' row: the
previews listed), status, rss_mb, peak_mb. tests/reliability/test_long_run_bench.py (slow) runs it.
Point PYTHONPATH at an older tree's src/ (a `git archive` of it) to measure that one.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from bench.dataset_scale import tiny_pngs
from bench.home_scale import HomeBench
from lorastudio.jobs.records import METRIC_KEYS, JobStatus
from lorastudio.jobs.store import RunStore
from lorastudio.training.resume.identity import IDENTITY_FORMAT
from lorastudio.training.resume.run_files import CHECKPOINTS, LORAS, SAMPLES, snapshot_name

RUN = "long-run"
STAMP = "2026-01-01T00:00:00+00:00"
LOG_PART = 16 << 20  # a worker log's rotation size (jobs/worker_log.py)


def build(home: Path, args: argparse.Namespace) -> None:
    """The home of one long run (see the module's docstring)."""
    for sub in ("datasets", "outputs", "models", "logs", "gallery"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    steps = args.steps
    prompts = [f"prompt {i}" for i in range(args.prompts)]
    config = {"family": "flux", "base_model": "tiny-flux", "data_dir": "set", "steps": steps, "output_name": RUN,
              "sample_prompts": prompts, "sample_every": args.sample_every, "save_every": 500,
              "keep_last": args.keep_last, "save_lora_every": 500, "keep_loras": args.keep_loras}  # fmt: skip
    store = RunStore.open(home / "lorastudio.db")
    try:
        store.create_run(RUN, RUN, "flux", config, STAMP, status=JobStatus.RUNNING)
        cols = ", ".join(METRIC_KEYS)
        with store._tx() as cur:
            cur.executemany(
                f"INSERT INTO metrics (run_id, {cols}) VALUES (?,?,?,?,?,?,?,?,?)",
                ((RUN, s, s // 1000, 1.0 / s, 1.0 / s, 1e-4, 0.5, 1.0, 1.5) for s in range(1, steps + 1)),
            )
            cur.executemany(
                "INSERT INTO validation (run_id, step, loss) VALUES (?, ?, ?)",
                ((RUN, s, 0.1) for s in range(args.validate_every, steps + 1, args.validate_every)),
            )
        store.finish_run(RUN, JobStatus.STOPPED, STAMP, "stopped", steps, None)
    finally:
        store.close()
    run_dir = home / "outputs" / RUN
    png = tiny_pngs(1)[0]
    (run_dir / SAMPLES).mkdir(parents=True)
    for step in range(args.sample_every, steps + 1, args.sample_every):
        for i in range(args.prompts):
            (run_dir / SAMPLES / f"step-{step:06d}-{i}.png").write_bytes(png)
    for step in range(steps - 500 * (args.keep_last - 1), steps + 1, 500):
        folder = run_dir / CHECKPOINTS / f"step-{step:06d}"
        folder.mkdir(parents=True)
        info = {"format": IDENTITY_FORMAT, "step": step, "total_steps": 2 * steps, "identity": {},
                "config": {"steps": 2 * steps}}  # fmt: skip
        (folder / "identity.json").write_text(json.dumps(info))
        (folder / "state.pt").write_bytes(b"\0")
        (folder / "lora.safetensors").write_bytes(b"\0")
    (run_dir / LORAS).mkdir()
    for step in range(steps - 500 * (args.keep_loras - 1), steps + 1, 500):
        snapshot = run_dir / LORAS / f"{snapshot_name(RUN, step)}.safetensors"
        snapshot.write_bytes(b"\0")
        snapshot.with_suffix(".json").write_text(json.dumps({"family": "flux", "steps": step}))
    line = b"2026-01-01 00:00:00,000+0000 step 99999/100000 loss 0.0123 lr 1e-4 1.5 it/s\n"
    chunk = line * (LOG_PART // len(line))
    (home / "logs" / f"{RUN}.log.1").write_bytes(chunk)
    (home / "logs" / f"{RUN}.log").write_bytes(chunk)


def options(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's options (`argv`: None, the command line's; [] the defaults)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--sample-every", type=int, default=250)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--validate-every", type=int, default=100)
    parser.add_argument("--keep-last", type=int, default=3)
    parser.add_argument("--keep-loras", type=int, default=20)
    parser.add_argument(
        "--images", type=int, default=50, help="sample images fetched, as a Samples view does"
    )
    parser.add_argument("--rounds", type=int, default=10, help="repeats of the run's record")
    return parser.parse_args(argv)


def run(home: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Build the home under `home` and measure it (see the module's docstring); returns the rows."""
    build(home, args)
    bench = HomeBench(home)
    try:
        base = f"/api/runs/{RUN}"
        record = bench.step("run record (its page)", "GET", base).json()
        print(
            json.dumps(
                {"metric points": len(record["metrics"]), "validation rounds": len(record["validation"])}
            )
        )
        bench.mark()
        for _ in range(args.rounds):
            bench.client.get(base).raise_for_status()
        bench.record(f"run record x{args.rounds} (cpu: all)", 0.0)
        # its first page: the newest 100 rounds (RELIABILITY 1341; was every round, 553 KB at 400 rounds)
        samples = bench.step("samples list", "GET", f"{base}/samples").json()["samples"]
        bench.mark()
        for sample in samples[-args.images :]:
            bench.client.get(sample["url"]).raise_for_status()
        bench.record(f"{args.images} sample images (cpu: all)", 0.0, len(samples))
        bench.step("checkpoints", "GET", f"{base}/checkpoints")
        bench.step("loras", "GET", f"{base}/loras")
        bench.step("log (500 lines of 32 MB)", "GET", f"{base}/log")
        bench.step("config", "GET", f"{base}/config")
        bench.step("runs list", "GET", "/api/runs")
        bench.step("status", "GET", "/api/train/status")
    finally:
        bench.close()
    return bench.rows


def main() -> None:
    args = options()
    with tempfile.TemporaryDirectory(prefix="lorastudio-long-") as tmp:
        run(Path(tmp) / "home", args)


if __name__ == "__main__":
    main()
