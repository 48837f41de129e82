"""Random-weight pipeline folders of the released configs for bench/e2e_run.py, saved fast.

Layout of an e2e folder DIR (one family per folder; the Qwen-Image one is ~57.7 GB):
    DIR/<family>/              the pipeline (diffusers folder, bf16 safetensors)
    DIR/home/                  the studio home of the runs (LORASTUDIO_HOME): caches, outputs
    DIR/home/datasets/e2e/     the dataset (under the home: the API accepts only datasets there)
Each of DIR/<family> and DIR/home may be a symlink into /dev/shm: before building, the free space
of DIR's disk, of /dev/shm and of host RAM decides where each goes, and a build that fits nowhere
is refused (NoSpaceLeft: needed vs free) before anything is written (bench/e2e_place.py).

Real size (`build_real`, on the GPU in bf16; the modules: bench/e2e_models.py): FLUX.1-dev (12B
MM-DiT with guidance embeddings, T5-XXL encoder, CLIP-L text model, the 16-channel VAE), Qwen-Image
(QwenImageTransformer2DModel's defaults = the released 20B, Qwen2.5-VL-7B-Instruct as
Qwen2_5_VLForConditionalGeneration, the Qwen-Image VAE = AutoencoderKLQwenImage's defaults) or
FLUX.2 [klein] 9B base (the 9B transformer of bench/models_2026.KLEIN, Qwen3-8B as
Qwen3ForCausalLM, AutoencoderKLFlux2's defaults = the released FLUX.2 VAE; ~34.7 GB), Z-Image
(ZImageTransformer2DModel's defaults = the released 6.15 B DiT, Qwen3-4B as Qwen3Model, FLUX.1's
VAE; ~20.4 GB) or SDXL base (bench/models.SDXL_UNET, CLIP-L and bigG, its VAE; ~7 GB). The
tokenizers are lorastudio's tiny ones: their ids stay inside the real vocabularies.
`device="meta"` builds the same modules without memory (the CPU test checks the configs and
parameter counts that way, and the build sizes its folder from it).
Tiny (`build_tiny`): lorastudio.tiny's pipeline of the family and its sample dataset (CPU, seconds).

Saving: diffusers' DiffusionPipeline.save_pretrained writes one component after another; here
each component is written by its own thread (safetensors copies and writes outside the GIL), the
files being those save_pretrained writes (model_index.json from the pipeline's config, each
component's own save_pretrained), so the folder loads with from_pretrained as usual. Host RAM:
both libraries' save_pretrained write shard by shard through safetensors.torch.save_file, which
copies the shard's GPU tensors to the CPU (a CPU tensor is written in place, without a copy), so
a save holds at most SAVE_WORKERS x SHARD of host RAM (the largest single tensor, Qwen3-8B's
embedding, is 1.24 GB), never a second copy of a component. The folder is written under a hidden
staging name and renamed when complete: a build that dies leaves no folder that looks built.
"""

from __future__ import annotations

import resource
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench import e2e_place
from bench.e2e_models import component_gb, param_counts, real_pipeline

FAMILIES = ("flux", "qwen-image", "flux2-klein", "z-image", "sdxl")
SHARD = "2GB"  # safetensors shard size of the saved components (bounds the save's host RAM)
SAVE_WORKERS = 4  # components written at once
TINY_HOME_GB = 0.5  # the studio home of a tiny suite
IMAGES = 16  # images of the real-size dataset (1024 px)
DATASET = "e2e"  # the dataset's folder name under the home's datasets/


def home_dir(root: Path) -> Path:
    return root / "home"


def dataset_dir(root: Path) -> Path:
    return home_dir(root) / "datasets" / DATASET


def pipeline_dir(root: Path, family: str) -> Path:
    return root / family


def save_pipeline(pipe: Any, out: Path, shard: str = SHARD, workers: int = SAVE_WORKERS) -> None:
    """Write `pipe` as a diffusers folder at `out` (see the module docstring): model_index.json,
    then every component, `workers` at a time, each in its own subfolder in shards of `shard`;
    all under a hidden staging folder renamed to `out` at the end (an old `out` is replaced)."""
    stage = out.parent / f".{out.name}.partial"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    pipe.save_config(stage)  # model_index.json, as DiffusionPipeline.save_pretrained writes it

    def save(item: tuple[str, Any]) -> None:
        name, component = item
        if component is None:
            return
        if hasattr(component, "parameters"):  # a model (diffusers or transformers)
            component.save_pretrained(stage / name, safe_serialization=True, max_shard_size=shard)
        else:  # tokenizer, scheduler
            component.save_pretrained(stage / name)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(save, pipe.components.items()))
    if out.is_symlink():
        out.unlink()
    shutil.rmtree(out, ignore_errors=True)
    stage.rename(out)


def write_dataset(out: Path, images: int = IMAGES, side: int = 1024, seed: int = 0) -> None:
    """`images` side x side PNG test patterns with .txt captions in `out`."""
    import numpy as np
    from PIL import Image

    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:side, 0:side] / float(side)
    for i in range(images):
        a, b, c = rng.uniform(0.5, 6.0, 3)
        img = np.stack([np.sin(a * xx + i), np.cos(b * yy), np.sin(c * (xx + yy))], -1)  # [H, W, 3]
        Image.fromarray(((img + 1) * 127.5).astype(np.uint8)).save(out / f"img{i:02d}.png")
        (out / f"img{i:02d}.txt").write_text(f"a test pattern number {i}, waves and colours")


def _folder_gb(folder: Path) -> float:
    return round(sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e9, 2)


def _peak_rss_gib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)


def remove_build(root: Path, family: str) -> None:
    """Delete an earlier build of `family` (DIR/<family>, the folder it links to, any staging
    folder of a build that died) so that its space counts as free for the new one."""
    folder = pipeline_dir(root, family)
    if folder.is_symlink():
        shutil.rmtree(folder.resolve(), ignore_errors=True)
        folder.unlink()
    shutil.rmtree(folder, ignore_errors=True)
    for base in (root, e2e_place.SHM / e2e_place.SHM_DIR):
        shutil.rmtree(base / f".{family}.partial", ignore_errors=True)


def _placed(root: Path, family: str, sizes: dict[str, float], prefer: str, tiny: bool) -> e2e_place.Placement:
    """Choose the places (bench/e2e_place.py; NoSpaceLeft before anything is written), create the
    home there and link DIR/home to it unless DIR/home already is one (an earlier build's)."""
    home_gb = TINY_HOME_GB if tiny else e2e_place.HOME_GB
    placement = e2e_place.place(
        root, family, sum(sizes.values()), e2e_place.run_host_gb(sizes), prefer, home_gb
    )
    home = home_dir(root)
    if not home.exists():  # neither a folder nor a live link
        placement.home.mkdir(parents=True, exist_ok=True)
        e2e_place.link(placement.home, home)
    return placement


def _build(
    root: Path, family: str, pipe: Any, sizes: dict[str, float], prefer: str, tiny: bool = False
) -> dict[str, Any]:
    placement = _placed(root, family, sizes, prefer, tiny)
    t = time.monotonic()
    save_pipeline(pipe, placement.pipeline)
    e2e_place.link(placement.pipeline, pipeline_dir(root, family))
    return {
        "save_s": round(time.monotonic() - t, 2),
        "params_b": param_counts(pipe),
        "pipeline_gb": _folder_gb(pipeline_dir(root, family)),
        "pipeline_at": str(placement.pipeline),
        "home_at": str(home_dir(root).resolve()),
        "placement": {**placement.where, **placement.figures},
    }


def build_real(root: Path, family: str, seed: int = 0, prefer: str = "auto") -> dict[str, Any]:
    """Write DIR/<family> (real size, built on the GPU) and the 1024 px dataset, where there is
    room (bench/e2e_place.py; NoSpaceLeft before building when there is none). Returns timings,
    sizes, the places and the process's peak host RSS."""
    sizes = component_gb(real_pipeline(family, "meta", seed))
    remove_build(root, family)
    e2e_place.place(root, family, sum(sizes.values()), e2e_place.run_host_gb(sizes), prefer)  # refuse early
    t0 = time.monotonic()
    pipe = real_pipeline(family, "cuda", seed)
    import torch

    torch.cuda.synchronize()
    built = time.monotonic() - t0
    result = _build(root, family, pipe, sizes, prefer)
    write_dataset(dataset_dir(root), seed=seed)
    return {"family": family, "build_s": round(built, 1), **result, "peak_host_rss_gib": _peak_rss_gib()}


def build_tiny(root: Path, family: str, seed: int = 0, prefer: str = "disk") -> dict[str, Any]:
    """Write DIR/<family> (lorastudio.tiny's pipeline, saved like the real one, placed like it:
    on DIR's disk by default) and the tiny sample dataset (8 images)."""
    from lorastudio.tiny import build_tiny_pipeline, make_sample_dataset

    t0 = time.monotonic()
    pipe = build_tiny_pipeline(family, seed)
    remove_build(root, family)
    built = time.monotonic() - t0
    result = _build(root, family, pipe, component_gb(pipe), prefer, tiny=True)
    make_sample_dataset(dataset_dir(root), seed)
    return {"family": family, "tiny": True, "build_s": round(built, 2), **result}
