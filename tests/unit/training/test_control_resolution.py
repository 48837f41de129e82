"""TrainConfig.control_resolution (data/control_sizing.py): controls trained at the size their
family's edit pipeline encodes a reference at ("pipeline"), at their target's bucket ("target")
or at the pipeline's rule for another area (an int)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from lorastudio import families
from lorastudio.config import resolve_train_config
from lorastudio.data.run_scan import scan_for_run
from lorastudio.settings import get_settings
from lorastudio.training.latents import build_latent_cache
from lorastudio.training.loop import train


@pytest.fixture(scope="module")
def wide_pairs(small_dataset, tmp_path_factory):
    """small_dataset with a control per target of another shape than its target (a 3:2 and a
    2:3 one alternately), so its own size differs from the target's bucket."""
    out = tmp_path_factory.mktemp("wide-pairs") / "wide"
    shutil.copytree(small_dataset, out)
    (out / "control").mkdir()
    rng = np.random.default_rng(0)
    for i, img in enumerate(sorted(out.glob("*.png"))):
        size = (96, 64) if i % 2 else (64, 96)
        pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
        Image.fromarray(pixels).save(out / "control" / img.name)
    return out


def _cache(family_name, cfg_overrides, data, make_config):
    fam = families.get(family_name)
    cfg = resolve_train_config(make_config(family_name, data_dir=str(data), **cfg_overrides))
    scan = scan_for_run(data, cfg, fam.spec, get_settings())
    vae = fam.load_vae(cfg.base_model, None, torch.float32, torch.device("cpu"))
    cache = build_latent_cache(
        fam, vae, scan.items, cfg, np.random.default_rng(0), device=torch.device("cpu"),
        emit=[].append, check_stop=lambda: None,
    )  # fmt: skip
    return fam, scan, cache


def test_timing_pipeline(make_config, wide_pairs):
    import time

    t = time.perf_counter()
    fam, scan, cache = _cache("flux-kontext", {"control_resolution": "pipeline"}, wide_pairs, make_config)
    print("cache", time.perf_counter() - t, [it.control_sizes for it in scan.items])
    t = time.perf_counter()
    r = train(
        make_config("flux-kontext", data_dir=str(wide_pairs), control_resolution="pipeline"),
        [].append,
        device="cpu",
    )
    print("train", time.perf_counter() - t, r.losses)
