"""Data-parallel training on the CPU, the maths: two gloo processes (tests/ddp_launch.py: launched
like torchrun) train the same LoRA, within float tolerance, as one process with the same global
batch and seed: flux and Qwen-Image (a LoRA layer without a gradient), a weighted datasets entry,
Prodigy + EMA + LoKr + Huber (slow), the on-disk cache with and without controls of their own
size. Only rank 0 emits and writes. Stops and preflight outcomes across ranks are
test_ddp_stop.py's, the shared caches test_ddp_caches.py's, the refusals test_ddp_rules.py's."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from ddp_launch import LORA_ATOL, LORA_RTOL, LOSS_RTOL, METHODS, mix_settings, sized_controls
from lorastudio.settings import get_settings
from lorastudio.training.loop import train


@pytest.mark.slow  # a heavy variant of the two-rank test
def test_two_gloo_processes_train_like_one_with_prodigy_ema_lokr_and_huber(make_config, launched):
    single = train(make_config(output_name="single", **METHODS), [].append, device="cpu")
    (rank0, _) = launched.ranks("methods")
    assert rank0["losses"] == pytest.approx(single.losses, rel=LOSS_RTOL)
    for suffix in (".safetensors", ".raw.safetensors"):  # the EMA LoRA and the raw one
        expected = load_file(str(single.lora_path).replace(".safetensors", suffix))
        got = load_file(rank0["lora_path"].replace(".safetensors", suffix))
        assert sorted(got) == sorted(expected) and all(k.startswith("lycoris_") for k in got)
        for key, tensor in expected.items():
            torch.testing.assert_close(got[key], tensor, atol=LORA_ATOL, rtol=LORA_RTOL, msg=key)


def test_two_gloo_processes_train_a_weighted_entry_like_one(make_config, launched):
    """The entry's loss_weight scales each sample before the batch is cut into the ranks'
    slices: two ranks train the LoRA of one process."""
    single = train(make_config(output_name="single", **mix_settings(make_config)), [].append, device="cpu")
    (rank0, _) = launched.ranks("mix")
    assert rank0["losses"] == pytest.approx(single.losses, rel=LOSS_RTOL)
    expected, got = load_file(str(single.lora_path)), load_file(rank0["lora_path"])
    assert sorted(got) == sorted(expected)
    for key, tensor in expected.items():
        torch.testing.assert_close(got[key], tensor, atol=LORA_ATOL, rtol=LORA_RTOL, msg=key)


@pytest.mark.parametrize("family", ["flux", "qwen-image"])  # Qwen-Image: a LoRA layer without a gradient
def test_two_gloo_processes_train_the_lora_of_one_process(make_config, launched, family):
    single_cfg = make_config(family, steps=4, batch_size=2, output_name="single")
    single = train(single_cfg, [].append, device="cpu")
    ranks = launched.ranks(family)

    for record in ranks:  # every rank ran the same steps and reports the all-reduced loss
        assert record["steps_run"] == 4
        assert record["losses"] == pytest.approx(single.losses, rel=LOSS_RTOL)
    assert ranks[0]["events"][-1] == "complete" and ranks[0]["events"].count("progress") == 4
    assert ranks[1]["events"] == [] and ranks[1]["lora_path"] is None  # rank 1 is silent
    # the decode scan once: rank 0 decodes every image, rank 1 finds them in the record after it
    assert ranks[0]["full_decodes"] > 0 and ranks[1]["full_decodes"] == 0

    assert single.lora_path is not None and ranks[0]["lora_path"] is not None
    expected = load_file(str(single.lora_path))
    got = load_file(ranks[0]["lora_path"])
    assert sorted(got) == sorted(expected)
    moved = 0
    for key, tensor in expected.items():
        torch.testing.assert_close(got[key], tensor, atol=LORA_ATOL, rtol=LORA_RTOL, msg=key)
        moved += int(bool(tensor.abs().max() > 1e-3))
    assert moved > 0  # the LoRA trained (B moved away from its zero init)
    assert [p.name for p in launched.outputs(family).iterdir()] == ["ddp"]  # rank 1 wrote nothing else
    assert [p.name for p in get_settings().outputs_dir.iterdir()] == ["single"]


def test_two_gloo_processes_train_sized_controls_from_the_disk_cache_like_one(make_config, launched):
    single = train(sized_controls(make_config, latent_cache="memory", output_name="single-controls"),
                   [].append, device="cpu")  # fmt: skip
    for record in launched.ranks("disk-controls"):
        assert record["losses"] == pytest.approx(single.losses, rel=LOSS_RTOL)
    shards = list(
        (launched.out / "disk-controls" / "home" / "cache" / "encoded" / "latents").rglob("*.safetensors")
    )
    assert len(shards) == 4 and all(sorted(load_file(str(s))) == ["control_0", "mean", "std"] for s in shards)


def test_two_gloo_processes_train_from_the_disk_cache_like_one(make_config, launched):
    single = train(make_config(steps=4, batch_size=2, output_name="single"), [].append, device="cpu")
    for record in launched.ranks("disk"):
        assert record["losses"] == pytest.approx(single.losses, rel=LOSS_RTOL)
    cache = launched.out / "disk" / "home" / "cache" / "encoded"
    assert len(list((cache / "latents").rglob("*.safetensors"))) == 4  # one variant of 4 images
    assert len(list((cache / "text").rglob("*.safetensors"))) == 4 and not list(cache.rglob("*.tmp"))
