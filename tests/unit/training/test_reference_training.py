"""FLUX.2 with reference images (families/flux2.py): a run on a mixed dataset (targets with 1
reference, targets without) trains both kinds of sample, and the references shape what it learns."""

from __future__ import annotations

import shutil

import pytest
from safetensors.torch import load_file

from lorastudio.training.loop import train


@pytest.fixture
def mixed_pairs(small_pairs, tmp_path):
    """small_pairs with one target's control removed: 3 edit samples, 1 text-to-image one."""
    out = tmp_path / "mixed"
    shutil.copytree(small_pairs, out)
    sorted((out / "control").glob("*.png"))[-1].unlink()
    return out


def test_flux2_klein_trains_a_mixed_dataset_and_the_references_count(make_config, small_dataset, mixed_pairs):
    settings = {"lora_format": "diffusers", "steps": 3, "batch_size": 2}
    events: list = []
    mixed = train(
        make_config("flux2-klein", data_dir=str(mixed_pairs), output_name="mixed", **settings),
        events.append,
        device="cpu",
    )
    assert mixed.steps_run == 3 and all(loss == loss for loss in mixed.losses)  # finite, every batch ran
    plain = train(
        make_config("flux2-klein", data_dir=str(small_dataset), output_name="plain", **settings),
        [].append,
        device="cpu",
    )
    a, b = load_file(mixed.lora_path), load_file(plain.lora_path)
    assert a.keys() == b.keys()
    assert any(not (a[k] == b[k]).all() for k in a)  # the same targets, the references changed the LoRA
