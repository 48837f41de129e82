"""How fast a pipeline's big components reach the GPU, by loading route (issue 31 item 1: the
weights load is the floor of the time to the first step; RESULTS note 27: FLUX.1's 23.8 GB
denoiser took 7.9 s from the page cache, ~3 GB/s, where host memory moves 10+ GB/s).

    python -m bench.load_speed ROOT [--family flux] [--rounds 2] [--device cuda] [--out OUT]

ROOT has bench/e2e_build's layout (ROOT/<family> a pipeline folder). Each route loads the denoiser
and the first text encoder in a fresh process (diffusers reads HF_ENABLE_PARALLEL_LOADING at
import), with the folder's files in the page cache (read once first), and reports seconds and
GB/s per component:

    cpu_then_move   from_pretrained to the CPU, then .to(cuda): the engine's route today
                    (families/base.load_denoiser, then families/common.frozen)
    parallel        the same with HF_ENABLE_PARALLEL_LOADING=yes (diffusers' thread pool over
                    the shard files; transformers loads its own way)
    device_map      from_pretrained(device_map={"": device}): each tensor read straight to the GPU
    both            device_map with the parallel shard loading

The routes are the libraries' own switches; nothing here is lorastudio code, so the numbers say
which route the engine should take, not what it does.
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

ROUTES = ("cpu_then_move", "parallel", "device_map", "both")


def _component_classes(folder: Path) -> dict[str, tuple[str, str]]:
    """{subfolder: (library, class)} for the denoiser and the first text encoder of a pipeline."""
    index = json.loads((folder / "model_index.json").read_text())
    picked: dict[str, tuple[str, str]] = {}
    for name in ("transformer", "unet", "text_encoder_2", "text_encoder"):
        if name in index and isinstance(index[name], list) and index[name][0]:
            picked[name] = (index[name][0], index[name][1])
    keep = [n for n in ("transformer", "unet") if n in picked][:1]
    keep += [n for n in ("text_encoder_2", "text_encoder") if n in picked][:1]
    return {n: picked[n] for n in keep}


def _warm(folder: Path) -> float:
    """Read every weight file once (page cache); returns GB read."""
    total = 0
    for f in folder.rglob("*.safetensors"):
        with f.open("rb") as fh:
            while chunk := fh.read(64 << 20):
                total += len(chunk)
    return total / 1e9


def _child(folder: Path, route: str, device: str) -> dict[str, Any]:
    import importlib

    import torch

    out: dict[str, Any] = {"route": route}
    for sub, (lib, cls_name) in _component_classes(folder).items():
        cls = getattr(importlib.import_module(lib), cls_name)
        gb = sum(f.stat().st_size for f in (folder / sub).glob("*.safetensors")) / 1e9
        _sync(device)
        t0 = time.perf_counter()
        if route in ("device_map", "both"):
            model = cls.from_pretrained(folder, subfolder=sub, dtype=torch.bfloat16, device_map={"": device})
        else:
            model = cls.from_pretrained(folder, subfolder=sub, dtype=torch.bfloat16).to(device)
        _sync(device)
        seconds = time.perf_counter() - t0
        devices = {str(p.device) for p in model.parameters()}
        out[sub] = {
            "seconds": round(seconds, 2),
            "gb": round(gb, 2),
            "gb_per_s": round(gb / seconds, 2),
            "devices": sorted(devices),
        }
        del model
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return out


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--family", default="flux")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--child", default=None, help="(internal) one route in this process")
    args = parser.parse_args(argv)
    folder = (args.root / args.family).resolve()
    if args.child:
        print(json.dumps(_child(folder, args.child, args.device)))
        return 0
    rows: list[dict[str, Any]] = []
    warmed = _warm(folder)
    for _ in range(args.rounds):
        for route in ROUTES:
            env = dict(os.environ)
            env.pop("HF_ENABLE_PARALLEL_LOADING", None)
            if route in ("parallel", "both"):
                env["HF_ENABLE_PARALLEL_LOADING"] = "yes"
            cmd = [
                sys.executable,
                "-m",
                "bench.load_speed",
                str(args.root),
                "--family",
                args.family,
                "--child",
                route,
                "--device",
                args.device,
            ]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                rows.append({"route": route, "error": done.stderr[-1500:]})
            else:
                rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    result = {"family": args.family, "folder": str(folder), "warmed_gb": round(warmed, 2), "rows": rows}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"load-speed-{args.family}.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
