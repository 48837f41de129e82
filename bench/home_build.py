"""A studio home after a year of use, built cheaply (the session 34 home at scale audit).

No training: the run store's rows are written by the store's own writer (RunStore.create_run,
add_metric, finish_run), run folders hold what a run writes there under the names the studio
gives them (training/resume/run_files.py: checkpoints/step-N with identity.json, state.pt and
lora.safetensors; samples/step-N-I.png; <name>.safetensors and its sidecar), the gallery holds
numbered PNGs with settings sidecars (jobs/gallery.py's names), datasets hold tiny PNGs with
captions (bench/dataset_scale.py's), logs/ one log per run. Every file is a few bytes, so 2,000
runs and 20,000 images take about a minute. The latent cache is left out: its cap and prune are
bench/disk_cache.py's.

`build_home(home, Scale(...))` is what bench/home_scale.py measures and what the slow test
tests/reliability/test_home_scale.py builds at a small size.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from bench.dataset_scale import tiny_pngs
from lorastudio.jobs.records import JobStatus
from lorastudio.jobs.store import RunStore
from lorastudio.training.resume.identity import IDENTITY_FORMAT
from lorastudio.training.resume.run_files import CHECKPOINTS, LORAS, SAMPLES, ema_step_name, snapshot_name

STATUSES = (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.STOPPED)


@dataclass(frozen=True)
class Scale:
    """How much a home holds: `runs` records (every `heavy_every`-th run with `checkpoints`
    checkpoints and `samples` sample images), `gallery` generated images, `datasets` folders of
    `dataset_images` images each, `log_kb` of log per run."""

    runs: int = 2000
    heavy_every: int = 20
    checkpoints: int = 50
    samples: int = 200
    gallery: int = 20_000
    datasets: int = 300
    dataset_images: int = 20
    log_kb: int = 8
    metrics: int = 10


def run_id(i: int) -> str:
    return f"run{i:06d}"


def output_name(i: int) -> str:
    return f"lora-{i:05d}"


def build_home(home: Path, scale: Scale) -> dict[str, int]:
    """Write a home of `scale` under `home` (created). Returns the files written per kind."""
    for sub in ("datasets", "outputs", "models", "logs", "gallery"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    counts = {"runs": _runs(home, scale), "gallery": _gallery(home, scale.gallery)}
    counts["datasets"] = _datasets(home, scale)
    return counts


def _runs(home: Path, scale: Scale) -> int:
    """The store's rows and the run folders; returns the files written."""
    store = RunStore.open(home / "lorastudio.db")
    store._conn.execute("PRAGMA synchronous=OFF")  # a bench's build: no fsync per row (the rows are the same)
    files = 0
    try:
        for i in range(scale.runs):
            rid, name = run_id(i), output_name(i)
            config = {"family": "flux", "base_model": "tiny-flux", "data_dir": f"set{i % 300:03d}",
                      "steps": 1000, "output_name": name, "sample_prompts": ["a cat", "a dog", "a fox", "a jay"],
                      "ema_decay": 0.999 if i % scale.heavy_every == 0 else None}  # fmt: skip
            stamp = f"2026-{1 + i * 12 // max(scale.runs, 1):02d}-01T00:00:00+00:00"
            store.create_run(rid, name, "flux", config, stamp, status=JobStatus.RUNNING)
            for step in range(1, scale.metrics + 1):
                store.add_metric(rid, {"step": step * 20, "loss": 1.0 / step, "lr": 1e-4})
            status = STATUSES[i % len(STATUSES)]
            run_dir = home / "outputs" / name
            run_dir.mkdir()
            lora = run_dir / f"{name}.safetensors"
            lora.write_bytes(b"\0" * 64)
            sidecar: dict = {"family": "flux", "rank": 16, "steps": 1000}
            if (
                i % scale.heavy_every == 0
            ):  # an EMA run: its LoRA holds the EMA weights, its last snapshot the raw
                sidecar |= {"steps": scale.checkpoints * 20, "ema": {"weights": "ema", "decay": 0.999}}
            (run_dir / f"{name}.json").write_text(json.dumps(sidecar))
            files += 2 + _heavy(run_dir, scale) if i % scale.heavy_every == 0 else 2
            store.finish_run(rid, status, stamp, None if status is JobStatus.COMPLETED else "stopped",
                             scale.metrics * 20, str(lora))  # fmt: skip
            (home / "logs" / f"{rid}.log").write_bytes(
                b"2026-01-01 00:00:00,000+0000 a line\n" * (scale.log_kb * 28)
            )
            files += 1
    finally:
        store.close()
    return files


def _heavy(run_dir: Path, scale: Scale) -> int:
    """`scale.checkpoints` checkpoint folders and `scale.samples` samples in `run_dir`."""
    total = scale.checkpoints * 20
    name = run_dir.name
    (run_dir / LORAS).mkdir()
    for c in range(1, scale.checkpoints + 1):
        step = c * 20
        folder = run_dir / CHECKPOINTS / f"step-{step:06d}"
        folder.mkdir(parents=True)
        info = {"format": IDENTITY_FORMAT, "step": step, "total_steps": total, "identity": {},
                "config": {"steps": total}}  # fmt: skip
        (folder / "identity.json").write_text(json.dumps(info))
        (folder / "state.pt").write_bytes(b"\0")
        (folder / "lora.safetensors").write_bytes(b"\0")
        ema = folder / f"{ema_step_name(name, step)}.safetensors"  # an EMA run's EMA file of the step
        ema.write_bytes(b"\0")
        ema.with_suffix(".json").write_text(
            json.dumps({"family": "flux", "ema": {"weights": "ema", "decay": 0.999}, "steps": step})
        )
        snapshot = run_dir / LORAS / f"{snapshot_name(name, step)}.safetensors"
        snapshot.write_bytes(b"\0")
        snapshot.with_suffix(".json").write_text(json.dumps({"family": "flux", "steps": step}))
    samples = run_dir / SAMPLES
    samples.mkdir()
    png = tiny_pngs(1)[0]
    for s in range(scale.samples):
        (samples / f"step-{(s // 4 + 1) * 20:06d}-{s % 4}.png").write_bytes(png)
    return scale.checkpoints * 7 + scale.samples


def _gallery(home: Path, count: int) -> int:
    folder = home / "gallery"
    pngs = tiny_pngs(min(count, 256))
    for n in range(1, count + 1):
        stem = f"{n:06d}_20260101-000000-{n}-{n:08x}"
        (folder / f"{stem}.json").write_text(
            json.dumps({"prompt": f"image {n}", "seed": n, "family": "flux"})
        )
        (folder / f"{stem}.png").write_bytes(pngs[n % len(pngs)])
    return 2 * count


def _datasets(home: Path, scale: Scale) -> int:
    pngs = tiny_pngs(scale.dataset_images)
    for d in range(scale.datasets):
        folder = home / "datasets" / f"set{d:03d}"
        folder.mkdir()
        for i, data in enumerate(pngs):
            (folder / f"img{i:04d}.png").write_bytes(data)
            (folder / f"img{i:04d}.txt").write_text(f"a tiny square number {i}")
    return 2 * scale.datasets * scale.dataset_images
