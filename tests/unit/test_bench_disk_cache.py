"""bench/disk_cache.py on the CPU with the tiny FLUX.1: a cold and a warm latent_cache = "disk" run,
each a fresh process, through the bench's own entry point (so the GPU call does not fail on an import
or a path): the warm run encodes no image and no caption, and the final losses agree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_cold_then_warm_runs_through_the_bench(tmp_path: Path) -> None:
    from lorastudio.tiny import build_tiny_pipeline

    model = tmp_path / "flux"
    build_tiny_pipeline("flux").save_pretrained(model)
    common = ["--images", "4", "--resolution", "64", "--device", "cpu", "--model", str(model)]
    bench = [sys.executable, "-m", "bench.disk_cache"]
    env_path = f"{REPO / 'src'}:{REPO}"
    env = {"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    subprocess.run([*bench, "data", str(tmp_path), *common], cwd=REPO, env=env, check=True, timeout=120)
    done = subprocess.run(
        [*bench, "run", str(tmp_path), *common, "--steps", "2", "--runs", "cold,warm"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads((tmp_path / "disk-cache-4-cold-warm.json").read_text())
    cold, warm = out["cold"], out["warm"]
    assert "rc" not in cold and "rc" not in warm, out
    assert cold["vae_images"] > 0 and cold["captions"] > 0
    assert (warm["vae_images"], warm["captions"]) == (0, 0)  # everything came from the shards
    assert (
        "latents" in cold["cache_gb"] and warm["cache_gb"] == cold["cache_gb"]
    )  # nothing rewritten (GB, 3 places)
