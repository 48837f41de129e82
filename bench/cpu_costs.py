"""What the tiny models' work costs on one CPU thread, in CPU time (time.thread_time: a shared
host's load moves wall time 2-3x, CPU time far less), against the wall-time forecast's cost model
(jobs/time_work.py). bench/RESULTS note 42.

    PYTHONPATH=$PWD/src python -m bench.cpu_costs [--sizes 256 512 1024 2048] [--models DIR]

Prints, each size's fastest of 3 rounds:
  vae      the tiny VAE's encode (FLUX.1's, every family's tiny 2D VAE) and its seconds by module
           kind (Conv2d, GroupNorm, SiLU, Attention: forward hooks), its decode; vae_work of each
  step     a training step's forward + backward (the base frozen, the input's gradient taken) of the
           tiny FLUX.1 (512 text tokens, T5's padding) and the tiny Z-Image (20 caption tokens:
           it does not pad), and step_work of each (Z-Image at 512 and at 32 text tokens)
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path
from typing import Any


def _best(fn: Any, rounds: int = 3) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.thread_time()
        fn()
        best = min(best, time.thread_time() - t0)
    return best


def vae(models: Path, sizes: list[int]) -> None:
    import torch

    from lorastudio.jobs.time_work import vae_work
    from lorastudio.tiny.parts import flux1_vae

    model = str(models / "tiny-flux")
    coder = flux1_vae(0).eval()
    kinds: dict[str, float] = defaultdict(float)

    def before(m: Any, _: Any) -> None:
        m._t0 = time.thread_time()

    def after(m: Any, _: Any, __: Any) -> None:
        kinds[type(m).__name__] += time.thread_time() - m._t0

    for m in coder.encoder.modules():
        if type(m).__name__ in ("Conv2d", "Attention", "GroupNorm", "SiLU"):
            m.register_forward_pre_hook(before)
            m.register_forward_hook(after)
    for side in sizes:
        x = torch.randn(1, 3, side, side)
        z = torch.randn(1, 16, side // 8, side // 8)
        best, split = float("inf"), {}
        for _ in range(3):
            kinds.clear()
            with torch.no_grad():
                t0 = time.thread_time()
                coder.encode(x)
                t = time.thread_time() - t0
            if t < best:
                best, split = t, dict(kinds)
        with torch.no_grad():
            decode = _best(lambda: coder.decode(z))  # noqa: B023
        print(
            f"vae {side} px: encode {best:.3f} s { ({k: round(v, 3) for k, v in split.items()}) },"
            f" decode {decode:.3f} s; work encode {vae_work('flux', model, side * side):.3e},"
            f" decode {vae_work('flux', model, side * side, 'decoder'):.3e}",
            flush=True,
        )


def steps(models: Path, sizes: list[int]) -> None:
    import torch
    from diffusers import FluxTransformer2DModel, ZImageTransformer2DModel

    from lorastudio.families.z_image_attention import RealRopeZImageAttnProcessor
    from lorastudio.jobs import time_work

    z = ZImageTransformer2DModel.from_pretrained(models / "tiny-z-image" / "transformer").requires_grad_(
        False
    )
    for m in z.modules():
        if type(m).__name__ == "Attention":
            m.set_processor(RealRopeZImageAttnProcessor())  # the family's (families/z_image.py)
    f = FluxTransformer2DModel.from_pretrained(models / "tiny-flux" / "transformer").requires_grad_(False)

    def z_step(side: int) -> None:
        x = torch.randn(16, 1, side // 8, side // 8, requires_grad=True)  # [C, F, h, w]
        out = z([x], torch.tensor([0.5]), [torch.randn(20, 32)], return_dict=False)[0]
        torch.stack(out).square().mean().backward()

    def f_step(side: int) -> None:
        h = side // 16
        x = torch.randn(1, h * h, 64, requires_grad=True)  # [B, tokens, C x 2 x 2]
        ids = torch.zeros(h * h, 3)
        ids[:, 1], ids[:, 2] = torch.arange(h).repeat_interleave(h), torch.arange(h).repeat(h)
        out = f(
            hidden_states=x, encoder_hidden_states=torch.randn(1, 512, 32), pooled_projections=torch.randn(1, 32),
            timestep=torch.tensor([0.5]), img_ids=ids, txt_ids=torch.zeros(512, 3),
            guidance=torch.tensor([3.5]), return_dict=False,
        )[0]  # fmt: skip
        out.square().mean().backward()

    shapes = {
        name: time_work._shapes(models / f"tiny-{name}" / "transformer") for name in ("flux", "z-image")
    }
    for side in sizes:
        img = (side / 16) ** 2  # tokens: pixels / (vae scale 8 x patch 2)^2
        print(
            f"step {side} px: flux {_best(lambda: f_step(side)):.3f} s"  # noqa: B023
            f" (work {time_work._transformer(shapes['flux'], img, 512):.3e}),"
            f" z-image {_best(lambda: z_step(side)):.3f} s"  # noqa: B023
            f" (work at 512 text tokens {time_work._transformer(shapes['z-image'], img, 512):.3e},"
            f" at 32 {time_work._transformer(shapes['z-image'], img, 32):.3e})",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--models", type=Path, default=Path("/tmp/lorastudio-cpu-costs"))
    args = parser.parse_args()
    import torch

    from lorastudio.tiny import save_tiny_model, tiny_model_dir

    torch.set_num_threads(1)
    for family in ("flux", "z-image"):
        save_tiny_model(family, tiny_model_dir(family, args.models))
    vae(args.models, args.sizes)
    steps(args.models, args.sizes)


if __name__ == "__main__":
    main()
