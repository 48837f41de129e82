"""The preflight's forecasts against real-size runs: two FLUX.1 runs of the same signature through
the product's entry point, each in its own process (as the job worker runs them), each preceded
by the preflight report of that run.

For each run also the host RAM forecast (`memory.host_gb`, jobs/host_memory.py) against the
process's peak RSS (GB = 1e9 bytes, as the forecast counts).

For each run: the wall-time forecast (total, source, confidence, phases) and the VRAM estimate the
preflight gave before it, then the run's wall time (the child's clock around train()), its phases
as the engine recorded them (<home>/run_timings/) and its peak allocated VRAM. The first run is
forecast cold (the H200 table), the second from the first's record.

usage (device, LORASTUDIO_HOME set): python -m bench.e2e_forecast ROOT [--steps 200] [--attention cudnn]
(builds ROOT/flux and its dataset with bench.e2e_build.build_real unless ROOT/flux holds one;
the layout is e2e_build's); prints and
writes ROOT/e2e-forecast.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import e2e_build

SAVE_EVERY = 100


def config(root: Path, name: str, steps: int, attention: str, resolution: int = 1024) -> dict[str, Any]:
    """bench.e2e_flux's run settings (note 23) under output name `name`."""
    return {
        "family": "flux",
        "base_model": str(e2e_build.pipeline_dir(root, "flux").resolve()),
        "data_dir": str(e2e_build.dataset_dir(root).resolve()),
        "output_name": name,
        "resolution": resolution,
        "batch_size": 1,
        "steps": steps,
        "lora_rank": 16,
        "learning_rate": 1e-4,
        "save_every": min(SAVE_EVERY, max(1, steps // 2)),
        "sample_every": min(SAVE_EVERY, max(1, steps // 2)),
        "sample_prompts": ["a test pattern, waves and colours"],
        "sample_steps": 20,
        "attention_backend": attention,
    }


def one(root: Path, name: str, steps: int, attention: str, resolution: int) -> dict[str, Any]:
    """Preflight, then train, in this process. Returns the row."""
    import torch

    from lorastudio.jobs.preflight import preflight_report
    from lorastudio.jobs.validation import validate_run
    from lorastudio.settings import get_settings
    from lorastudio.timings import read_records
    from lorastudio.training.loop import train

    settings = get_settings().ensure_dirs()
    run = validate_run(
        config(root, name, steps, attention, resolution),
        settings,
        live_output_names=set(),
        allow_outside_root=True,
    )
    report = preflight_report(run, home=settings.home)
    t0 = time.monotonic()
    train(run.worker_config, lambda event: None, settings=settings)
    wall = time.monotonic() - t0
    record = read_records(settings.home)[0]
    forecast = report["time"]
    return {
        "name": name,
        "forecast_total_s": forecast["total_s"],
        "forecast_source": forecast["source"],
        "forecast_confidence": forecast["confidence"],
        "forecast_phases": {p["name"]: p["seconds"] for p in forecast["phases"]},
        "wall_s": round(wall, 1),
        "error": round(forecast["total_s"] / wall - 1, 3),
        "recorded_phases": record["phases"],
        "recorded_s_per_step": record["s_per_step"],
        "vram_estimate_gib": round(report["memory"]["estimated_gb"] * 1e9 / 2**30, 1),
        "host_forecast_gb": report["memory"].get("host_gb"),
        "host_forecast_certain": report["memory"].get("host_certain"),
        "peak_host_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9, 2),
        "peak_vram_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1)
        if torch.cuda.is_available()
        else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--attention", default="cudnn")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--resolution", type=int, default=1024)
    parser.add_argument("--one", default=None, help="(internal) run this output name in this process")
    args = parser.parse_args()
    if args.one:
        print(
            "ROW " + json.dumps(one(args.root, args.one, args.steps, args.attention, args.resolution)),
            flush=True,
        )
        return
    if not (e2e_build.pipeline_dir(args.root, "flux") / "model_index.json").is_file():
        print(json.dumps({"build": e2e_build.build_real(args.root, "flux")}), flush=True)
    rows = []
    for i in range(args.runs):
        cmd = [sys.executable, "-m", "bench.e2e_forecast", str(args.root), "--steps", str(args.steps)]
        cmd += [
            "--attention",
            args.attention,
            "--resolution",
            str(args.resolution),
            "--one",
            f"e2e-forecast-{i + 1}",
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        row = next(
            (json.loads(line[4:]) for line in out.stdout.splitlines() if line.startswith("ROW ")), None
        )
        rows.append(row or {"failed": out.returncode, "stderr": out.stderr[-3000:]})
        print(json.dumps(rows[-1]), flush=True)
    (args.root / "e2e-forecast.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
