"""The on-disk encode cache, cold vs warm, at real size: two runs on the same data and model.

`data ROOT --images N`: N 1024 px images with captions in ROOT/data-N (the FLUX.1 pipeline
folder comes from `python -m bench.e2e_flux build ROOT`).

`run ROOT --images N`: `latent_cache = "disk"` runs (4 crop/flip variants per image, random crop
and flip, batch 1, compile off: the preparation is what is timed) on ROOT/flux and ROOT/data-N,
each in a fresh process, all with one studio home ROOT/home-N whose cache starts empty:
cold (encodes every image and caption, writes the shards), warm (reads them: no VAE or text
encoder call for a cached item), and with --memory a third run with latent_cache = "memory"
(the RAM cache: the step speed to compare). Prints and writes ROOT/disk-cache-N.json: per run
the weights load, caption encoding and latent cache seconds, time to the first step, steady
samples/s, the VAE images / captions encoded (counted), the cache's size on disk and the peak
host RSS.

usage (device):
    python -m bench.e2e_flux build /tmp/e2e
    python -m bench.disk_cache data /tmp/e2e --images 512
    python -m bench.disk_cache run /tmp/e2e --images 512 --steps 40 [--memory] [--runs cold]
(each run loads the 12B pipeline: with a 10-minute limit per call, one run per call, `--runs cold`
then `--runs warm`, `--runs memory --memory`, keeps each inside it)
CPU smoke test: `--model DIR` (a tiny FLUX.1 folder: lorastudio tiny) --resolution 64 --device cpu.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def make_data(folder: Path, images: int, side: int = 1024, seed: int = 0) -> None:
    """`images` PNG test patterns of side x side px (a few non-square) with distinct captions."""
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(images):
        w, h = (side, side) if i % 4 else (side * 5 // 4, side)  # every 4th wider: random crops differ
        yy, xx = np.mgrid[0:h, 0:w] / side
        a, b, c = rng.uniform(0.5, 6.0, 3)
        img = np.stack([np.sin(a * xx + i), np.cos(b * yy), np.sin(c * (xx + yy))], -1)  # [H, W, 3]
        Image.fromarray(((img + 1) * 127.5).astype(np.uint8)).save(folder / f"img{i:05d}.png")
        (folder / f"img{i:05d}.txt").write_text(f"test pattern {i}, waves and colours")


def one_run(args: argparse.Namespace) -> dict[str, Any]:
    """One run in this process (LORASTUDIO_HOME set by the parent); returns its figures."""
    import torch

    from bench.e2e_phases import phase_table
    from bench.e2e_run import Recorder
    from lorastudio import families
    from lorastudio.config import parse_train_config
    from lorastudio.data.disk_cache import cache_root, cache_stats
    from lorastudio.settings import get_settings
    from lorastudio.training import loop

    cls = type(families.get("flux"))
    counted = {"vae_images": 0, "captions": 0}
    encode_pixels, encode_prompts = cls.encode_pixels, cls.encode_prompts

    def pixels(self: Any, vae: Any, batch: Any) -> Any:
        counted["vae_images"] += int(batch.shape[0])
        return encode_pixels(self, vae, batch)

    def prompts(self: Any, encoders: Any, texts: Any, cfg: Any, **kw: Any) -> Any:
        counted["captions"] += len(texts)
        return encode_prompts(self, encoders, texts, cfg, **kw)

    cls.encode_pixels, cls.encode_prompts = pixels, prompts  # bench instrumentation only
    cfg = parse_train_config(
        {
            "family": "flux",
            "base_model": str(args.model),
            "data_dir": str(args.data),
            "output_name": f"cache-{args.label}-{time.strftime('%H%M%S')}",  # a run again: a new folder
            "resolution": args.resolution,
            "batch_size": 1,
            "steps": args.steps,
            "lora_rank": 16,
            "learning_rate": 1e-4,
            "random_crop": True,
            "random_flip": True,
            "cache_variants": 4,
            "latent_cache": args.mode,
            # the RAM cache's budget: refused where it is not read (latent_cache = "disk")
            **({"latent_cache_max_gb": 64} if args.mode != "disk" else {}),
            "compile": "off",
            **({"max_sequence_length": 32} if args.device == "cpu" else {}),
        }
    )
    rec = Recorder(time.monotonic())
    loop.train(cfg, rec, device=args.device)
    out = phase_table(rec.events, time.monotonic() - rec.t0)
    peak = torch.cuda.max_memory_allocated() / 2**30 if args.device.startswith("cuda") else 0.0
    out["peak_vram_gib"] = round(peak, 1)
    stats = cache_stats(cache_root(get_settings()))
    out.update(counted, mode=args.mode, cache_gb={s.kind: round(s.bytes / 1e9, 3) for s in stats})
    out["peak_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)  # KiB
    return out


def compare(args: argparse.Namespace) -> dict[str, Any]:
    """cold, warm (and memory) runs, each a fresh process sharing one studio home."""
    home = args.root / f"home-{args.images}"
    runs = [("cold", "disk"), ("warm", "disk")] + ([("memory", "memory")] if args.memory else [])
    if args.runs:  # a subset (one device call each: the home and its cache stay between calls)
        runs = [(label, mode) for label, mode in runs if label in args.runs.split(",")]
    out: dict[str, Any] = {"images": args.images, "steps": args.steps}
    for label, mode in runs:
        cmd = [
            sys.executable, "-m", "bench.disk_cache", "one", str(args.root), "--images", str(args.images),
            "--steps", str(args.steps), "--mode", mode, "--label", label, "--device", args.device,
            "--resolution", str(args.resolution), "--model", str(args.model), "--data", str(args.data),
        ]  # fmt: skip
        env = {**os.environ, "LORASTUDIO_HOME": str(home)}
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        sys.stderr.write(done.stderr[-4000:])
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
        out[label] = json.loads(lines[-1]) if done.returncode == 0 and lines else {"rc": done.returncode}
        print(f"{label}: {json.dumps(out[label])}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["data", "run", "one"])
    parser.add_argument("root", type=Path)
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--resolution", type=int, default=1024)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--memory", action="store_true", help="also a latent_cache = memory run")
    parser.add_argument("--model", type=Path, default=None, help="default ROOT/flux (bench.e2e_flux build)")
    parser.add_argument("--data", type=Path, default=None, help="default ROOT/data-N")
    parser.add_argument("--runs", default="", help="comma-separated subset of cold,warm,memory")
    parser.add_argument("--mode", default="disk")
    parser.add_argument("--label", default="run")
    args = parser.parse_args()
    args.model = args.model or args.root / "flux"
    args.data = args.data or args.root / f"data-{args.images}"
    if args.what == "data":
        make_data(args.data, args.images, args.resolution)
        return
    if args.what == "one":
        print(json.dumps(one_run(args), default=str), flush=True)
        return
    out = compare(args)
    name = f"disk-cache-{args.images}{'-' + args.runs.replace(',', '-') if args.runs else ''}.json"
    (args.root / name).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    sys.exit(main())
