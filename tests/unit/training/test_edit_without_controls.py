"""Text-to-image in the edit families (issue 27 item 3): Qwen-Image-Edit-Plus (2509 / 2511) and
FLUX.1 Kontext train samples without a control as their pipelines generate without an image, also
mixed with pairs in one dataset; the Plus pipeline (whose __call__ needs an image) renders a
prompt without references through Family.render_without_references; the single-image edit
pipeline refuses targets without a control by name."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from lorastudio import families
from lorastudio.config import TrainConfig, resolve_train_config
from lorastudio.training.loop import train

PROMPT = "a red circle on a blue background"
RES = 32


@pytest.fixture(scope="module")
def plus_2511(tmp_path_factory):
    from lorastudio.tiny.qwen_edit import build_qwen_image_edit

    folder = tmp_path_factory.mktemp("plus") / "plus-2511"
    build_qwen_image_edit(0, plus=True, zero_cond_t=True).save_pretrained(folder)
    return folder


@pytest.fixture
def mixed_pairs(small_pairs, tmp_path):
    """small_pairs with two targets' controls removed: 2 edit samples, 2 text-to-image ones."""
    out = tmp_path / "mixed"
    shutil.copytree(small_pairs, out)
    for control in sorted((out / "control").glob("*.png"))[:2]:
        control.unlink()
    return out


def test_plus_predicts_without_controls_as_its_text_to_image_step(plus_2511):
    """A control-less prompt is encoded by the Plus encode_prompt with image=None, and predict
    equals one step of the pipeline Family.render_without_references renders it with."""
    from diffusers import DiffusionPipeline

    fam = families.get("qwen-image-edit")
    base = str(plus_2511)
    cfg = resolve_train_config(
        TrainConfig(family=fam.spec.name, base_model=base, data_dir="unused", resolution=RES)
    )
    dev, dt = torch.device("cpu"), torch.float32
    enc = fam.load_text_encoders(base, None, dt, dev)
    (item,) = fam.encode_prompts(enc, [PROMPT], cfg, controls=[[]])
    embeds, _ = enc.encode_prompt([PROMPT], image=None, device=dev)
    torch.testing.assert_close(item["prompt_embeds"], embeds[0], rtol=0, atol=0)
    cond = fam.collate_conditioning([item])
    h = w = RES // fam.spec.vae_scale_factor
    noise = torch.randn(1, fam.spec.latent_channels, h, w, generator=torch.Generator().manual_seed(0))
    den = fam.load_denoiser(base, None, dt, dev)
    info = {"original_size": [(RES, RES)], "crop_top_left": [(0, 0)], "target_size": (RES, RES)}
    with torch.no_grad():
        velocity = fam.predict(den, noise, torch.ones(1), cond, info, cfg)  # [1, C, h, w]

    pipe = DiffusionPipeline.from_pretrained(base)
    pipe.set_progress_bar_config(disable=True)
    if pipe.scheduler.config.get("shift_terminal"):  # a 1-step schedule cannot be stretched to a terminal
        pipe.scheduler = pipe.scheduler.from_config(pipe.scheduler.config, shift_terminal=None)
    assert type(pipe).__name__ == "QwenImageEditPlusPipeline"
    kwargs = {k: v for k, v in fam.spec.generation_defaults.items() if k != "num_inference_steps"}
    render, kwargs = fam.render_without_references(
        pipe, {**kwargs, **fam.spec.no_cfg_kwargs, "prompt": PROMPT}
    )
    assert type(render).__name__ == "QwenImagePipeline" and render.transformer is pipe.transformer
    out = render(
        height=RES, width=RES, num_inference_steps=1, latents=fam.to_pipeline_latents(render, noise),
        output_type="latent", **kwargs,
    ).images  # fmt: skip
    got = fam.from_pipeline_latents(render, out, (h, w))
    torch.testing.assert_close(got.float(), noise - velocity, rtol=1e-4, atol=1e-4)


def test_plus_trains_a_mixed_dataset_and_samples_without_references(make_config, mixed_pairs, plus_2511):
    cfg = make_config(
        "qwen-image-edit",
        base_model=str(plus_2511),
        data_dir=str(mixed_pairs),
        steps=2,
        batch_size=2,
        sample_steps=2,  # one step: the tiny scheduler's shift_terminal gives NaN (a black image)
        sample_prompts=[{"prompt": PROMPT, "controls": []}, {"prompt": PROMPT}],
    )
    result = train(cfg, [].append, device="cpu")
    assert result.steps_run == 2 and all(loss == loss for loss in result.losses)
    run_dir = result.lora_path.parent
    images = [
        np.asarray(Image.open(run_dir / f"samples/step-000002-{i}.png"), dtype=np.float32) for i in range(2)
    ]
    assert images[0].shape == (RES, RES, 3) and images[0].std() > 0  # rendered, not blank
    assert np.abs(images[0] - images[1]).max() > 0  # without and with the first pair's reference


def test_kontext_trains_a_mixed_dataset_and_its_controls_count(make_config, mixed_pairs, small_dataset):
    settings = {"steps": 2, "batch_size": 2, "lora_format": "diffusers"}
    mixed = train(make_config("flux-kontext", data_dir=str(mixed_pairs), output_name="mixed", **settings),
                  [].append, device="cpu")  # fmt: skip
    plain = train(make_config("flux-kontext", data_dir=str(small_dataset), output_name="plain", **settings),
                  [].append, device="cpu")  # fmt: skip
    assert mixed.steps_run == plain.steps_run == 2
    assert mixed.losses != plain.losses  # the pairs' references change what it learns


def test_the_single_image_edit_model_refuses_targets_without_a_control_by_name(make_config, mixed_pairs):
    from lorastudio.errors import DatasetError

    with pytest.raises(DatasetError) as err:
        train(make_config("qwen-image-edit", data_dir=str(mixed_pairs)), [].append, device="cpu")
    unpaired = sorted(p.name for p in mixed_pairs.glob("*.png"))[:2]
    assert all(
        any(p.startswith(f"{name}: no control image") for p in err.value.problems) for name in unpaired
    )


def test_generate_without_references_renders_plus_and_refuses_the_single_image_model(plus_2511, tiny_model):
    from lorastudio.errors import ConfigError
    from lorastudio.generate import load_pipeline
    from lorastudio.generate.pipeline import generate_image

    pipe = load_pipeline(str(plus_2511), "qwen-image-edit", device="cpu")
    args = {"prompt": PROMPT, "seed": 0, "steps": 2, "width": RES, "height": RES}
    image = generate_image(pipe, "qwen-image-edit", **args)
    assert image.size == (RES, RES) and np.asarray(image).std() > 0
    again = generate_image(pipe, "qwen-image-edit", **args)
    assert np.array_equal(np.asarray(image), np.asarray(again))  # the same seed, the same image
    single = load_pipeline(str(tiny_model("qwen-image-edit")), "qwen-image-edit", device="cpu")
    with pytest.raises(ConfigError, match="controls"):
        generate_image(single, "qwen-image-edit", **args)
