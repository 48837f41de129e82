"""Sample previews during training (tiny FLUX.1): rounds every N steps and at the end, files
and events, no effect on the training maths, cleanup on discard, config checks, safe names."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from lorastudio.config import MAX_SAMPLE_PROMPT_CHARS, MAX_SAMPLE_PROMPTS, parse_train_config
from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings
from lorastudio.training.events import SampleReady, StopRequest
from lorastudio.training.loop import train
from lorastudio.training.resume.checkpoint import find_checkpoint, read_checkpoint_info, resume_settings
from lorastudio.training.sample_files import (
    list_samples,
    parse_sample_name,
    sample_name,
    sample_path,
    write_sample_files,
)

PROMPTS = ["a red circle", "a blue square"]


def _samples(events: list) -> list[SampleReady]:
    return [e for e in events if e.type == "sample_ready"]


def _stop_after(events: list, steps: int, save: bool):
    return lambda: StopRequest(save=save) if sum(e.type == "progress" for e in events) >= steps else None


def test_samples_leave_losses_and_lora_bitwise_unchanged(make_config):
    # LoRA dropout and caption dropout draw from the global torch RNG and the run's numpy RNG
    common = {"steps": 3, "lora_dropout": 0.3, "caption_dropout": 0.5}
    plain = train(make_config(output_name="plain", **common), [].append, device="cpu")
    events: list = []
    cfg = make_config(output_name="sampled", sample_prompts=PROMPTS, sample_every=2, sample_steps=2, **common)
    sampled = train(cfg, events.append, device="cpu")
    assert sampled.losses == plain.losses
    a, b = load_file(str(plain.lora_path)), load_file(str(sampled.lora_path))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # a round at step 2 (every 2) and at the last step (3), announced after that step's progress
    ready = _samples(events)
    assert [e.step for e in ready] == [2, 3]
    assert ready[0].images == ["samples/step-000002-0.png", "samples/step-000002-1.png"]
    order = [e.type for e in events]
    assert order.index("sample_ready") > [i for i, t in enumerate(order) if t == "progress"][1]
    run_dir = sampled.lora_path.parent
    for event in ready:
        for rel in event.images:
            with Image.open(run_dir / rel) as image:
                assert image.format == "PNG" and image.size == (cfg.resolution, cfg.resolution)
    assert [(f.step, f.index) for f in list_samples(run_dir)] == [(2, 0), (2, 1), (3, 0), (3, 1)]
    assert not [p for p in (run_dir / "samples").iterdir() if p.name.startswith(".")]
    # the LoRA changed between the rounds: so does the image of the same prompt and seed
    first = np.asarray(Image.open(run_dir / ready[0].images[0]), dtype=np.float32)
    last = np.asarray(Image.open(run_dir / ready[1].images[0]), dtype=np.float32)
    assert np.abs(first - last).max() > 0


def test_without_sample_every_only_the_end_is_rendered_and_the_seed_matters(make_config):
    events: list = []
    result = train(make_config(sample_prompts=PROMPTS[:1], sample_steps=2), events.append, device="cpu")
    assert [(e.step, e.images) for e in _samples(events)] == [(2, ["samples/step-000002-0.png"])]
    other: list = []
    cfg = make_config(output_name="seeded", sample_prompts=PROMPTS[:1], sample_steps=2, sample_seed=7)
    train(cfg, other.append, device="cpu")
    root = get_settings().outputs_dir
    seed0 = np.asarray(Image.open(result.lora_path.parent / "samples/step-000002-0.png"), dtype=np.float32)
    seed7 = np.asarray(Image.open(root / "seeded/samples/step-000002-0.png"), dtype=np.float32)
    assert np.abs(seed0 - seed7).max() > 0


def test_sdxl_in_bf16_decodes_its_samples_in_the_run_dtype(make_config):
    # the SDXL family loads its VAE in fp32 for latent caching; the pipeline's latents are bf16
    events: list = []
    cfg = make_config("sdxl", steps=1, base_precision="bf16", sample_prompts=PROMPTS[:1], sample_steps=1)
    result = train(cfg, events.append, device="cpu")
    (ready,) = _samples(events)
    with Image.open(result.lora_path.parent / ready.images[0]) as image:
        assert image.size == (cfg.resolution, cfg.resolution)


def test_stop_without_save_removes_the_samples(make_config):
    events: list = []
    cfg = make_config(steps=4, sample_prompts=PROMPTS[:1], sample_every=1, sample_steps=1)
    result = train(cfg, events.append, _stop_after(events, 2, save=False), device="cpu")
    assert result.stopped and [e.step for e in _samples(events)] == [1, 2]
    assert not (get_settings().outputs_dir / "run").exists()


def test_a_resume_may_add_samples_and_a_discarded_resume_removes_only_its_own(make_config):
    events: list = []
    first = train(make_config(steps=4), events.append, _stop_after(events, 2, save=True), device="cpu")
    run_dir = first.lora_path.parent
    checkpoint = find_checkpoint(run_dir)
    write_sample_files(run_dir, 2, [lambda p: p.write_bytes(b"older")])  # a file of an earlier session
    overrides = {"sample_prompts": PROMPTS[:1], "sample_every": 1, "sample_steps": 1}
    raw = resume_settings(read_checkpoint_info(checkpoint), overrides)
    resumed: list = []
    result = train(
        parse_train_config(raw),
        resumed.append,
        _stop_after(resumed, 1, save=False),
        device="cpu",
        resume=checkpoint,
    )
    assert result.stopped and [e.step for e in _samples(resumed)] == [3]
    assert [f.name for f in list_samples(run_dir)] == ["step-000002-0.png"]
    assert find_checkpoint(run_dir) == checkpoint


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"sample_every": 5}, "sample_every"),
        ({"sample_steps": 4}, "sample_steps"),
        ({"sample_seed": 3}, "sample_seed"),
        ({"sample_prompts": ["x"] * (MAX_SAMPLE_PROMPTS + 1)}, "sample_prompts"),
        ({"sample_prompts": ["x" * (MAX_SAMPLE_PROMPT_CHARS + 1)]}, "sample_prompts"),
        ({"sample_prompts": ["  "]}, "sample_prompts"),
        ({"sample_prompts": ["x"], "sample_every": 0}, "sample_every"),
        ({"sample_prompts": ["x"], "sample_steps": 0}, "sample_steps"),
    ],
)
def test_bad_sample_settings_are_refused(settings, field, tiny_model, small_dataset):
    base = {"family": "flux", "base_model": str(tiny_model("flux")), "data_dir": str(small_dataset)}
    with pytest.raises(ConfigError) as err:
        parse_train_config({**base, **settings})
    assert field in {p.field.split(".")[0] for p in err.value.problems}


def test_sample_names_and_paths_stay_inside_the_samples_folder(tmp_path):
    assert sample_name(123, 1) == "step-000123-1.png" and parse_sample_name("step-000123-1.png") == (123, 1)
    for bad in ("../x.png", "step-000001-0.png/..", "step-1-0.png", ".staging-ab.png", "step-000001-0.jpg"):
        assert parse_sample_name(bad) is None and sample_path(tmp_path, bad) is None
    (written,) = write_sample_files(tmp_path, 1, [lambda p: p.write_bytes(b"png")])
    assert sample_path(tmp_path, "step-000001-0.png") == written
    outside = tmp_path / "secret.png"
    outside.write_bytes(b"secret")
    os.symlink(outside, tmp_path / "samples" / "step-000002-0.png")
    assert sample_path(tmp_path, "step-000002-0.png") is None
    assert [f.name for f in list_samples(tmp_path)] == ["step-000001-0.png"]


def test_a_failed_write_leaves_no_staging_file(tmp_path):
    def broken(path):
        path.write_bytes(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_sample_files(tmp_path, 1, [lambda p: p.write_bytes(b"ok"), broken])
    assert list((tmp_path / "samples").iterdir()) == []
