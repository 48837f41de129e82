"""The caches of a data-parallel run, shared out over two gloo ranks (tests/ddp_launch.py) and
all-gathered: exactly the tensors of one process (conditioning, latents, crops, the rng after
them), with one stop poll per round on every rank; and the crop draws a rank replays for the
images it does not encode."""

from __future__ import annotations

import numpy as np
import torch

from ddp_caches_build import CACHE_CHUNK, build_caches, caches_config
from ddp_launch import WORLD
from lorastudio.data import load_crop, scan_dataset
from lorastudio.training.inputs import conditioning
from lorastudio.training.inputs.latents import replay_crop_draws


def test_ranks_share_the_caches_and_get_exactly_the_tensors_of_one_process(make_config, launched):
    cfg = caches_config(make_config)
    previous = conditioning.ENCODE_CHUNK
    try:
        single = build_caches(cfg)
    finally:
        conditioning.ENCODE_CHUNK = previous
    assert single["texts"] > 2 * CACHE_CHUNK  # more chunks than ranks: several rounds, uneven
    assert any(top or left for crops in single["crops"] for _, (top, left) in crops)
    for rank in range(WORLD):
        got = torch.load(launched.out / "caches" / f"cache{rank}.pt", weights_only=False)
        assert got["rng"] == single["rng"]  # the rng walked every image's draws on every rank
        assert got["crops"] == single["crops"] and got["sizes"] == single["sizes"]
        for name in ("means", "stds"):
            assert len(got[name]) == len(single[name])
            for a, b in zip(got[name], single[name], strict=True):
                assert torch.equal(a, b)
        for got_group, group in zip(got["conds"], single["conds"], strict=True):
            assert list(got_group) == list(group)
            for text, tensors in group.items():
                assert sorted(got_group[text]) == sorted(tensors)
                for key, tensor in tensors.items():
                    assert torch.equal(got_group[text][key], tensor), (text, key)
        assert got["polls"] < single["polls"]  # one stop poll per round, fewer rounds than items
    ranks = [
        torch.load(launched.out / "caches" / f"cache{r}.pt", weights_only=False)["polls"]
        for r in range(WORLD)
    ]
    assert ranks[0] == ranks[1]  # the polls are collectives: every rank makes the same number


def test_replayed_crop_draws_advance_the_rng_like_loading_the_crop(sample_dataset):
    items = [
        item
        for buckets in (True, False)
        for item in scan_dataset(sample_dataset, resolution=48, multiple=16, aspect_buckets=buckets).items
    ]
    assert any(it.width != it.height for it in items)  # some crops have slack to draw from
    loaded, replayed = np.random.default_rng(3), np.random.default_rng(3)
    for item in items:
        for random_crop in (True, False):
            load_crop(item, random_crop=random_crop, flip=False, rng=loaded)
            replay_crop_draws(item, random_crop, replayed)
            assert replayed.bit_generator.state == loaded.bit_generator.state
    assert loaded.bit_generator.state != np.random.default_rng(3).bit_generator.state
