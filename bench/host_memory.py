"""Measured peak host RAM of CPU runs on the tiny models vs the preflight's forecast.

Each point runs `lorastudio train` (CPU, a copy of the sample dataset) in its own child process
and reads that child's peak RSS from os.wait4 (ru_maxrss, KiB on Linux); the forecast is
jobs.preflight's `host_gb` for the same config. Usage:

    PYTHONPATH=$PWD/src python -m bench.host_memory --family flux --resolution 256 1024 2048

Prints one JSON line per point: family, resolution, images, measured_gb, forecast_gb, error (%),
seconds. With `--phase denoiser` the child trains in process (training.loop.train) and resets its
peak RSS (/proc/self/clear_refs 5, Linux) when the denoiser phase starts: measured_gb is then that
phase's peak (the VAE's, larger at high resolutions on the tiny models, no longer hides it) and
forecast_gb the forecast's base process + denoiser phase (`measure_denoiser_phase`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def measure(
    family: str,
    model: Path,
    data: Path,
    resolution: int,
    home: Path,
    steps: int = 1,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train `steps` steps of `family` at `resolution` (and the settings `extra`, e.g. batch_size)
    on the CPU in a child process; returns the child's peak RSS in GB (10^9 bytes), the wall
    seconds and the preflight's forecast."""
    from lorastudio.jobs.preflight import preflight_report
    from lorastudio.jobs.validation import validate_run

    name = f"hm-{family}-{resolution}-{time.time_ns()}"
    cfg = {
        "family": family,
        "base_model": str(model),
        "data_dir": str(data),
        "resolution": resolution,
        "steps": steps,
        "output_name": name,
        "lora_rank": 4,
        **(extra or {}),
    }
    home.mkdir(parents=True, exist_ok=True)
    path = home / f"{name}.json"
    path.write_text(json.dumps(cfg))
    env = {**os.environ, "LORASTUDIO_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    os.environ["LORASTUDIO_HOME"] = str(home)
    from lorastudio.settings import get_settings

    get_settings.cache_clear()
    run = validate_run(cfg, get_settings(), live_output_names=set(), allow_outside_root=True)
    report = preflight_report(run)
    entry = "import sys; from lorastudio.cli.app import main; sys.argv[0] = 'lorastudio'; main()"
    command = [sys.executable, "-c", entry, "train", str(path), "--device", "cpu"]
    t0 = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(
            f"{family} at {resolution}: {child.stderr.read().decode()[-2000:] if child.stderr else ''}"
        )
    measured = usage.ru_maxrss * 1024 / 1e9
    forecast = report["memory"].get("host_gb")
    return {
        "family": family,
        "resolution": resolution,
        "images": len(report["dataset"]["buckets"]) and sum(report["dataset"]["buckets"].values()),
        "measured_gb": round(measured, 3),
        "forecast_gb": forecast,
        "error_pct": None if forecast is None else round(100 * (forecast - measured) / measured, 1),
        "seconds": round(seconds, 1),
    }


# The child of measure_denoiser_phase: trains the config file argv[1] on the CPU, resets the peak
# RSS when the denoiser phase starts, prints that phase's peak RSS in kB (VmHWM).
_PHASE_CHILD = r"""
import ctypes, gc, json, re, sys
from pathlib import Path
from lorastudio.config import TrainConfig
from lorastudio.settings import get_settings
from lorastudio.training.loop import train

status = Path("/proc/self/status")
def on(event):
    if getattr(event, "type", "") == "preparing" and event.phase == "denoiser" and event.done == 0:
        gc.collect()
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # the earlier phases' freed memory back to the OS
        Path("/proc/self/clear_refs").write_text("5")
train(TrainConfig.model_validate_json(Path(sys.argv[1]).read_text()), on, settings=get_settings(), device="cpu")
print(re.search(r"VmHWM:\s+(\d+)", status.read_text()).group(1))
"""


def measure_denoiser_phase(
    family: str, model: Path, data: Path, resolution: int, home: Path
) -> dict[str, Any]:
    """Train one step of `family` at `resolution` on the CPU in a child process; returns the peak RSS
    of its denoiser phase in GB (10^9 bytes) against the forecast's BASE_PROCESS_GB + denoiser
    phase, the image tokens of the step and the wall seconds."""
    from lorastudio import families
    from lorastudio.jobs.host_memory import BASE_PROCESS_GB
    from lorastudio.jobs.preflight import preflight_report
    from lorastudio.jobs.validation import validate_run
    from lorastudio.settings import get_settings

    name = f"hmd-{family}-{resolution}-{time.time_ns()}"
    cfg = {
        "family": family,
        "base_model": str(model),
        "data_dir": str(data),
        "resolution": resolution,
        "steps": 1,
        "output_name": name,
        "lora_rank": 4,
    }
    home.mkdir(parents=True, exist_ok=True)
    os.environ["LORASTUDIO_HOME"] = str(home)
    get_settings.cache_clear()
    run = validate_run(cfg, get_settings(), live_output_names=set(), allow_outside_root=True)
    phases = preflight_report(run)["memory"]["host_phases"]
    path = home / f"{name}.json"
    path.write_text(run.config.model_dump_json())
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", _PHASE_CHILD, str(path)], env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise RuntimeError(f"{family} at {resolution}: {out.stderr[-2000:]}")
    measured = int(out.stdout.strip().splitlines()[-1]) * 1024 / 1e9
    spec = families.get(family).spec
    side = resolution // (spec.vae_scale_factor * spec.patch_size)
    forecast = BASE_PROCESS_GB + phases["denoiser"]
    return {
        "family": family,
        "resolution": resolution,
        "tokens": side * side,
        "measured_gb": round(measured, 3),
        "forecast_gb": round(forecast, 3),
        "error_pct": round(100 * (forecast - measured) / measured, 1),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--family", nargs="+", default=["sdxl", "flux"])
    parser.add_argument("--resolution", type=int, nargs="+", default=[256, 1024, 2048])
    parser.add_argument("--images", type=int, default=2, help="images of the sample dataset to train on")
    parser.add_argument(
        "--phase", choices=["run", "denoiser"], default="run", help="the run's peak or the denoiser phase's"
    )
    args = parser.parse_args()
    from lorastudio.tiny import make_sample_dataset, save_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = make_sample_dataset(root / "shapes")
        for extra in sorted(data.iterdir()):
            stem = extra.stem.rsplit("_", 1)[-1]
            if stem.isdigit() and int(stem) >= args.images:
                extra.unlink()
        for family in args.family:
            model = save_tiny_model(family, root / family)
            for resolution in args.resolution:
                point = (measure_denoiser_phase if args.phase == "denoiser" else measure)(
                    family, model, data, resolution, root / "home"
                )
                print(json.dumps(point), flush=True)


if __name__ == "__main__":
    main()
