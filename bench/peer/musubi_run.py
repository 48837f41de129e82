"""musubi-tuner's Qwen-Image LoRA trainer run from its own source (exported by fetch_musubi.sh,
on PYTHONPATH), one subprocess per row of bench/peer_musubi.py.

`prepare DIR`: the inputs musubi's `qwen_image_train_network.py` reads, at the released config:
  - the DiT: diffusers' `QwenImageTransformer2DModel` with random init (bench.models'
    build_denoiser, seed 0: the same model as bench.probe_speed's rows) saved as sharded
    safetensors named like a split checkpoint (`...-00001-of-0000N`, musubi's loader takes the
    first shard). The released checkpoint musubi's docs name (ComfyUI's qwen_image_bf16) uses
    diffusers' module names, which is what musubi's `load_state_dict(strict=True)` checks;
  - the latent and text-encoder-output caches written by musubi's own savers
    (dataset/cache_io.py) for `items` random items: latents [16, 1, H/8, W/8] and embeddings
    [tokens, 3584] (bench.models' Qwen-Image shapes: 128 tokens), bf16;
  - the dataset TOML (cache-only: no images, no VAE or text encoder is ever loaded; musubi
    loads those only to sample).
`train TIMING [--warm K] [--steady-s S] -- ARGS`: musubi's `qwen_image_train_network.main()`
  with ARGS, its trainer class replaced by a subclass whose `on_post_optimizer_step` (musubi's
  extension point for EMA and bookkeeping, a no-op in its base) records, after each optimizer
  step, the time (after a device sync: musubi's loop syncs there anyway, reading the loss) and
  the CUDA peak, rewriting TIMING
  (JSON) each step so a row killed at its deadline still reports; once the steps after the
  warm-up span `--steady-s` seconds it lowers `args.max_train_steps` to the current step, so
  musubi's own loop ends there (its `global_step >= max_train_steps` check) and saves the LoRA.
  Nothing of the step changes.

Modules musubi imports that this host may lack and the timed step never reaches get an empty
stand-in only when absent (recorded in TIMING): `av` (video decoding in dataset/media_utils.py)
and `torchvision` (hv_generate_video's image grids; present on the GPU machine).
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import os
import sys
import time
import types
from pathlib import Path
from typing import Any

STANDINS = ("av", "torchvision")
ARCH = "qi"  # musubi's ARCHITECTURE_QWEN_IMAGE, part of its cache file names


class _Absent(types.ModuleType):
    """Stand-in for a module musubi imports but the timed path never uses: any use fails."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise ImportError(f"{self.__name__} is not installed here (bench stand-in); musubi used {name!r}")


def import_musubi() -> list[str]:
    """Import musubi's Qwen-Image trainer module; returns the stand-ins it needed.

    transformers and diffusers are imported first so their package probes see the real
    environment (a stand-in would otherwise look installed to them)."""
    import diffusers  # noqa: F401
    from transformers import Qwen2_5_VLForConditionalGeneration  # noqa: F401

    used = []
    for name in STANDINS:
        if name not in sys.modules and importlib.util.find_spec(name) is None:
            module = _Absent(name)
            module.__spec__ = importlib.machinery.ModuleSpec(name, None)
            sys.modules[name] = module
            used.append(name)
    import musubi_tuner.qwen_image_train_network  # noqa: F401

    return used


def write_dit(path_stem: Path, layers: int | None, device: str, shards: int) -> list[Path]:
    """Random-init Qwen-Image DiT (released config; `layers` blocks if given) saved as
    `shards` safetensors files `<stem>-0000i-of-0000N.safetensors`, each staged then renamed."""
    import torch
    from diffusers import QwenImageTransformer2DModel
    from safetensors.torch import save_file

    from bench.models import build_denoiser

    if layers is None:
        model = build_denoiser("qwen", device, torch.bfloat16)
    else:  # the CPU proof: the same construction with fewer blocks
        torch.manual_seed(0)
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            with torch.device(device):
                model = QwenImageTransformer2DModel(num_layers=layers)
        finally:
            torch.set_default_dtype(previous)
    state = model.state_dict()
    keys = list(state)
    per = -(-len(keys) // shards)
    paths = []
    for i in range(shards):
        part = {k: state[k].detach().to("cpu").contiguous() for k in keys[i * per : (i + 1) * per]}
        final = path_stem.parent / f"{path_stem.name}-{i + 1:05d}-of-{shards:05d}.safetensors"
        staged = final.with_suffix(".tmp")
        save_file(part, str(staged))
        staged.rename(final)
        paths.append(final)
        del part
    del model, state
    return paths


def write_caches(cache_dir: Path, items: int, resolution: int, tokens: int) -> None:
    """Latent and text-encoder-output cache files for `items` random items, through musubi's
    savers (so the key names, dtype suffixes and metadata are its own)."""
    import torch
    from musubi_tuner.dataset.cache_io import (
        save_latent_cache_qwen_image,
        save_text_encoder_output_cache_qwen_image,
    )
    from musubi_tuner.dataset.image_video_dataset import ItemInfo

    g = torch.Generator().manual_seed(1)
    side = resolution // 8
    for i in range(items):
        key = f"item{i:03d}"
        info = ItemInfo(key, "random", (resolution, resolution))
        info.latent_cache_path = str(
            cache_dir / f"{key}_{resolution:04d}x{resolution:04d}_{ARCH}.safetensors"
        )
        info.text_encoder_output_cache_path = str(cache_dir / f"{key}_{ARCH}_te.safetensors")
        latent = torch.randn(16, 1, side, side, generator=g).to(torch.bfloat16)  # [C, F, h, w]
        embed = torch.randn(tokens, 3584, generator=g).to(torch.bfloat16)  # [L, D]
        save_latent_cache_qwen_image(info, latent, None)
        save_text_encoder_output_cache_qwen_image(info, embed)


def prepare(args: argparse.Namespace) -> None:
    root = Path(args.dir)
    cache = root / "cache"
    images = root / "images"  # musubi's image datasource globs it; empty: caches are the data
    for d in (cache, images):
        d.mkdir(parents=True, exist_ok=True)
    standins = import_musubi()
    t = time.monotonic()
    shards = write_dit(root / "qwen_image_bf16", args.layers, args.device, args.shards)
    dit_s = time.monotonic() - t
    write_caches(cache, args.items, args.resolution, args.tokens)
    repeats = -(-(args.steps + 2) // args.items)  # one epoch holds every step
    (root / "dataset.toml").write_text(
        "[general]\n"
        f"resolution = [{args.resolution}, {args.resolution}]\n"
        'caption_extension = ".txt"\n'
        "batch_size = 1\n"
        "enable_bucket = false\n"
        "bucket_no_upscale = false\n\n"
        "[[datasets]]\n"
        f'image_directory = "{images}"\n'
        f'cache_directory = "{cache}"\n'
        f"num_repeats = {repeats}\n"
    )
    print(
        json.dumps(
            {
                "dit": str(shards[0]),
                "dit_gib": round(sum(p.stat().st_size for p in shards) / 2**30, 2),
                "dit_write_s": round(dit_s, 1),
                "standins": standins,
            }
        )
    )


class StepClock:
    """Per optimizer step: seconds since the previous one (after a device sync) and the CUDA
    peak; the peak counter is reset after `warm` steps so `peak_gib_steady` is the steady
    step's (bench_step.timed resets after its warm-up the same way)."""

    def __init__(self, path: Path, warm: int, steady_s: float, standins: list[str]) -> None:
        self.path, self.warm, self.steady_s = path, warm, steady_s
        self.times: list[float] = []
        self.out: dict[str, Any] = {"standins": standins, "step_end_s": self.times, "t0": time.time()}

    def tick(self) -> bool:
        """Record one step; True once the steady window (after `warm` steps) holds `steady_s`."""
        import torch

        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.synchronize()
        self.times.append(round(time.monotonic(), 4))
        if cuda:
            peak = torch.cuda.max_memory_allocated() / 2**30
            if len(self.times) == self.warm:
                self.out["peak_gib_load_and_warmup"] = round(peak, 2)
                torch.cuda.reset_peak_memory_stats()
            elif len(self.times) > self.warm:
                self.out["peak_gib_steady"] = round(peak, 2)
        staged = self.path.with_suffix(".tmp")
        staged.write_text(json.dumps(self.out))
        staged.replace(self.path)
        steady = (
            len(self.times) > self.warm
            and self.times[-1] - self.times[max(self.warm - 1, 0)] >= self.steady_s
        )
        return self.steady_s > 0 and steady


def train(timing: Path, warm: int, steady_s: float, musubi_args: list[str]) -> None:
    standins = import_musubi()
    from musubi_tuner import qwen_image_train_network as qtn

    clock = StepClock(timing, warm, steady_s, standins)
    base = qtn.QwenImageNetworkTrainer

    class TimedTrainer(base):  # type: ignore[misc, valid-type]
        def on_post_optimizer_step(
            self, args, accelerator, network, transformer, sync_gradients, global_step
        ):  # noqa: ANN001, ANN201
            super().on_post_optimizer_step(
                args, accelerator, network, transformer, sync_gradients, global_step
            )
            if sync_gradients and clock.tick():
                # enough steady steps: end where musubi's loop checks its step budget (right
                # after this hook, with global_step + 1), as a run of that many steps would
                args.max_train_steps = global_step + 1

    qtn.QwenImageNetworkTrainer = TimedTrainer  # main() looks the class up at call time
    sys.argv = ["qwen_image_train_network.py", *musubi_args]
    qtn.main()
    clock.out["finished"] = True
    timing.write_text(json.dumps(clock.out), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("dir")
    p.add_argument("--layers", type=int, default=None, help="blocks (default: the released 60)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--resolution", type=int, default=1024)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--items", type=int, default=4)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--shards", type=int, default=4)
    t = sub.add_parser("train")
    t.add_argument("timing", type=Path)
    t.add_argument("--warm", type=int, default=5)
    t.add_argument(
        "--steady-s", type=float, default=0.0, help="stop once the steady steps span this (0: never)"
    )
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    if args.cmd == "prepare":
        prepare(args)
    else:
        train(args.timing, args.warm, args.steady_s, argv[split + 1 :])


if __name__ == "__main__":
    main()
