"""FLUX.2 with reference images (families/flux2.py): a run on a mixed dataset (targets with 1
reference, targets without) trains both kinds of sample, and the references shape what it learns."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from PIL import Image
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


def test_sample_prompts_render_with_their_references_and_keep_copies(make_config, small_pairs):
    """{"prompt", "controls"} renders with those references, [] without, a plain prompt with
    the first paired image's; a copy of each reference is kept beside the samples."""
    from lorastudio.training.sample_files import list_references

    first, other = sorted(p.name for p in (small_pairs / "control").glob("*.png"))[:2]
    prompt = "invert the colours"
    cfg = make_config(
        "flux2-klein",
        data_dir=str(small_pairs),
        resolution=64,  # Flux2ImageProcessor refuses references under 64 px
        steps=1,
        sample_steps=1,
        sample_prompts=[
            {"prompt": prompt, "controls": [f"control/{other}"]},
            {"prompt": prompt, "controls": []},
            prompt,
        ],
    )
    events: list = []
    result = train(cfg, events.append, device="cpu")
    run_dir = result.lora_path.parent
    images = [
        np.asarray(Image.open(run_dir / f"samples/step-000001-{i}.png"), dtype=np.float32) for i in range(3)
    ]
    assert np.abs(images[0] - images[1]).max() > 0  # the reference changes the render
    assert np.abs(images[0] - images[2]).max() > 0  # another reference, another render
    assert list_references(run_dir) == {0: ["ref-0-0.png"], 2: ["ref-2-0.png"]}
    with (
        Image.open(run_dir / "samples/ref-0-0.png") as kept,
        Image.open(small_pairs / "control" / other) as src,
    ):
        assert np.array_equal(np.asarray(kept.convert("RGB")), np.asarray(src.convert("RGB")))
    with (
        Image.open(run_dir / "samples/ref-2-0.png") as kept,
        Image.open(small_pairs / "control" / first) as src,
    ):
        assert np.array_equal(np.asarray(kept.convert("RGB")), np.asarray(src.convert("RGB")))


def test_the_plan_trial_batch_is_the_heaviest_group_of_a_mixed_dataset(make_config, small_pairs, tmp_path):
    """A memory budget measures one batch group (bucket and control count), the one with the
    most tokens (the references join the sequence); a bucket holding paired and unpaired
    samples never makes a mixed trial batch (whose controls could not be stacked)."""
    from types import SimpleNamespace

    import torch

    from lorastudio import families
    from lorastudio.config import resolve_train_config
    from lorastudio.data import scan_dataset
    from lorastudio.training.inputs.latents import build_latent_cache
    from lorastudio.training.planning.plan_measure import trial_inputs

    data = tmp_path / "mixed-largest"
    shutil.copytree(small_pairs, data)
    fam = families.get("flux2-klein")
    items = scan_dataset(data, resolution=32, multiple=16, control_images=fam.spec.control_images).items
    largest = max((it.bucket for it in items), key=lambda b: b[0] * b[1])
    first = next(it for it in items if it.bucket == largest)
    (data / "control" / first.path.name).unlink()  # the largest bucket's first sample: unpaired
    scan = scan_dataset(data, resolution=32, multiple=16, control_images=fam.spec.control_images)
    cfg = resolve_train_config(make_config("flux2-klein", data_dir=str(data), batch_size=2))
    vae = fam.load_vae(cfg.base_model, None, torch.float32, torch.device("cpu"))
    rng = np.random.default_rng(0)
    source = build_latent_cache(
        fam, vae, scan.items, cfg, rng, device=torch.device("cpu"), emit=[].append, check_stop=lambda: None
    )
    conds = {it.caption: {"prompt_embeds": torch.zeros(3, 8)} for it in scan.items}  # collated only
    run = SimpleNamespace(scan=scan, cfg=cfg, family=fam)
    inputs = trial_inputs(run, source, conds, rng)
    assert inputs.batch.controls is not None and inputs.batch.controls.shape[:2] == (2, 1)  # [B, K, ...]


def test_a_sample_prompt_sets_its_own_size_and_seed_with_its_references(make_config, small_pairs):
    """One SamplePrompt carries both: its references and its own width/height/seed."""
    other = sorted(p.name for p in (small_pairs / "control").glob("*.png"))[1]
    own = {"prompt": "invert the colours", "controls": [f"control/{other}"]}
    cfg = make_config(
        "flux2-klein",
        data_dir=str(small_pairs),
        resolution=64,
        steps=1,
        sample_steps=1,
        sample_prompts=[own, {**own, "width": 128, "height": 64, "seed": 7}],
    )
    run_dir = train(cfg, [].append, device="cpu").lora_path.parent
    shapes = [Image.open(run_dir / f"samples/step-000001-{i}.png").size for i in range(2)]
    assert shapes == [(64, 64), (128, 64)]  # (width, height)


def test_edit_prompts_are_fitted_to_each_sample_prompts_own_size(small_pairs):
    """Where the prompt sees the references (Qwen-Image-Edit), phase 1 encodes them fitted to the
    size that sample renders at (its own width/height, else the resolution)."""
    from lorastudio import families
    from lorastudio.config import TrainConfig
    from lorastudio.training.inputs.conditioning import EditPrompt
    from lorastudio.training.samples import sample_texts

    cfg = TrainConfig(
        family="qwen-image-edit",
        base_model="m",
        data_dir=str(small_pairs),
        resolution=64,
        sample_prompts=["a", {"prompt": "b", "width": 128, "height": 96}],
        control_resolution="target",
    )
    x, y = sorted((small_pairs / "control").glob("*.png"))[:2]
    refs = [(x,), (y,)]
    texts = sample_texts(cfg, families.get("qwen-image-edit"), refs)
    fits = {t.caption: t.fit for t in texts if isinstance(t, EditPrompt) and t.caption}
    assert fits == {"a": (64, 64), "b": (128, 96)}
    # controls sized on their own ("pipeline"): the references as they are, as training encodes them
    sized = sample_texts(
        cfg.model_copy(update={"control_resolution": "pipeline"}), families.get("qwen-image-edit"), refs
    )
    assert {t.caption: t.fit for t in sized if isinstance(t, EditPrompt) and t.caption} == {
        "a": None,
        "b": None,
    }
