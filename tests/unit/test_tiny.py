"""The tiny pipelines: real classes, real conventions, generate, save/load round trip, atomic saves."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from lorastudio import families
from lorastudio.errors import ModelSourceError, UnknownFamily
from lorastudio.tiny import (
    MARKER_FILE,
    TINY_FAMILIES,
    build_tiny_pipeline,
    read_marker,
    save_tiny_model,
    tiny_model_dir,
)
from lorastudio.tiny.staging import publish_dir

PROMPT = "a red circle on a blue background"
OTHER_PROMPT = "a green star on a white background"


def generate(pipe, family: str, prompt: str = PROMPT, seed: int = 0) -> np.ndarray:
    """A 2-step 32x32 image as float [H, W, 3] in [0, 1]."""
    pipe.set_progress_bar_config(disable=True)
    kwargs = {
        "prompt": prompt,
        "num_inference_steps": 2,
        "height": 32,
        "width": 32,
        "generator": torch.Generator().manual_seed(seed),
        "output_type": "np",
    }
    if family != "sdxl":
        kwargs["max_sequence_length"] = 32
    if families.get(family).spec.edit_model:  # an edit family: a reference image
        kwargs["image"] = Image.new("RGB", (32, 32), "red")
    if "max_area" in inspect.signature(type(pipe).__call__).parameters:
        kwargs["max_area"] = 32 * 32  # else the pipeline resizes the output to 1024x1024
    return pipe(**kwargs).images[0]


@pytest.fixture(scope="module")
def pipelines() -> dict[str, object]:
    return {family: build_tiny_pipeline(family) for family in TINY_FAMILIES}


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_generates_and_round_trips_through_a_pipeline_folder(family, pipelines, tiny_model):
    from diffusers import DiffusionPipeline

    pipe = pipelines[family]
    image = generate(pipe, family)
    assert image.shape == (32, 32, 3)
    assert np.isfinite(image).all()
    assert image.std() > 0  # not a constant image

    loaded = DiffusionPipeline.from_pretrained(tiny_model(family))
    assert type(loaded) is type(pipe)
    for name in ("tokenizer", "tokenizer_2"):
        if getattr(pipe, name, None) is not None:
            prompts = [PROMPT, OTHER_PROMPT.upper()]
            assert getattr(loaded, name)(prompts).input_ids == getattr(pipe, name)(prompts).input_ids
    np.testing.assert_allclose(generate(loaded, family), image, atol=1e-4)


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_modules_are_in_eval_mode_with_finite_weights(family, pipelines):
    modules = {k: v for k, v in pipelines[family].components.items() if isinstance(v, torch.nn.Module)}
    assert {"vae", "text_encoder"} <= set(modules)
    for name, module in modules.items():
        assert not any(m.training for m in module.modules()), f"{name} is in train mode"
        for pname, param in module.named_parameters():
            assert torch.isfinite(param).all(), f"{name}.{pname} is not finite"


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_the_prompt_steers_the_image(family, pipelines):
    pipe = pipelines[family]
    first = generate(pipe, family, PROMPT)
    np.testing.assert_array_equal(generate(pipe, family, PROMPT), first)
    # an edit pipeline's reference (~1 MP: thousands of tokens) outweighs a few text tokens
    least = 1e-6 if families.get(family).spec.prompt_sees_controls else 1e-3
    assert np.abs(generate(pipe, family, OTHER_PROMPT) - first).max() > least


def test_sdxl_follows_the_real_conventions(pipelines):
    pipe = pipelines["sdxl"]
    cfg = pipe.scheduler.config
    assert type(pipe.scheduler).__name__ == "EulerDiscreteScheduler"
    assert (cfg.beta_schedule, cfg.prediction_type, cfg.timestep_spacing, cfg.steps_offset) == (
        "scaled_linear",
        "epsilon",
        "leading",
        1,
    )
    assert (cfg.beta_start, cfg.beta_end) == (0.00085, 0.012)
    assert pipe.tokenizer_2.pad_token == "!"
    both = pipe.text_encoder.config.hidden_size + pipe.text_encoder_2.config.hidden_size
    assert pipe.unet.config.cross_attention_dim == both
    assert pipe.vae.config.latent_channels == 4 and pipe.vae_scale_factor == 8


def test_flux_follows_the_real_conventions(pipelines):
    pipe = pipelines["flux"]
    cfg = pipe.scheduler.config
    assert type(pipe.scheduler).__name__ == "FlowMatchEulerDiscreteScheduler"
    assert cfg.use_dynamic_shifting and (cfg.base_shift, cfg.max_shift) == (0.5, 1.15)
    assert (cfg.base_image_seq_len, cfg.max_image_seq_len) == (256, 4096)
    assert pipe.transformer.config.guidance_embeds
    assert type(pipe.text_encoder).__name__ == "CLIPTextModel"
    assert type(pipe.text_encoder_2).__name__ == "T5EncoderModel"
    assert pipe.transformer.config.joint_attention_dim == pipe.text_encoder_2.config.d_model
    assert pipe.transformer.config.pooled_projection_dim == pipe.text_encoder.config.hidden_size
    vae = pipe.vae.config
    assert (vae.latent_channels, vae.scaling_factor, vae.shift_factor) == (16, 0.3611, 0.1159)


def test_qwen_image_follows_the_real_conventions(pipelines):
    from diffusers import AutoencoderKLQwenImage

    pipe = pipelines["qwen-image"]
    cfg = pipe.scheduler.config
    assert cfg.use_dynamic_shifting and cfg.time_shift_type == "exponential"
    assert cfg.shift_terminal == 0.02 and (cfg.base_shift, cfg.max_shift) == (0.5, 0.9)
    assert type(pipe.text_encoder).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert isinstance(pipe.vae, AutoencoderKLQwenImage)
    real = inspect.signature(AutoencoderKLQwenImage.__init__).parameters
    assert list(pipe.vae.config.latents_mean) == real["latents_mean"].default
    assert list(pipe.vae.config.latents_std) == real["latents_std"].default
    latents = pipe.vae.encode(torch.zeros(1, 3, 1, 32, 32)).latent_dist.mean  # 5-D: [B, C, T, H, W]
    assert latents.shape == (1, 16, 1, 4, 4)


def test_z_image_follows_the_real_conventions(pipelines):
    pipe = pipelines["z-image"]
    cfg = pipe.scheduler.config
    assert cfg.shift == 3.0 and not cfg.use_dynamic_shifting
    assert type(pipe.text_encoder).__name__ == "Qwen3Model"
    assert pipe.tokenizer.chat_template
    assert pipe.transformer.config.cap_feat_dim == pipe.text_encoder.config.hidden_size
    for pad in (pipe.transformer.x_pad_token, pipe.transformer.cap_pad_token):
        assert torch.isfinite(pad).all() and pad.abs().sum() > 0
    flux_vae = pipelines["flux"].vae.config
    assert {k: pipe.vae.config[k] for k in flux_vae} == dict(flux_vae)  # Z-Image reuses the FLUX.1 VAE


def test_building_leaves_the_callers_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    build_tiny_pipeline("flux")
    assert torch.equal(torch.rand(4), expected)


def test_the_seed_changes_the_weights():
    a = build_tiny_pipeline("flux", seed=0).transformer.state_dict()
    b = build_tiny_pipeline("flux", seed=1).transformer.state_dict()
    c = build_tiny_pipeline("flux", seed=0).transformer.state_dict()
    assert all(torch.equal(a[k], c[k]) for k in a)
    assert not all(torch.equal(a[k], b[k]) for k in a)


def test_bad_family_raises_and_writes_nothing(tmp_path):
    with pytest.raises(UnknownFamily, match="valid families: sdxl, flux, qwen-image, z-image"):
        save_tiny_model("sd15", tmp_path / "out")
    with pytest.raises(UnknownFamily):
        build_tiny_pipeline("sd15")
    with pytest.raises(UnknownFamily):
        tiny_model_dir("sd15", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_canonical_folder():
    assert tiny_model_dir("qwen-image", Path("/m")) == Path("/m/tiny-qwen-image")


def test_save_is_idempotent_and_marks_the_folder(tiny_model):
    folder = tiny_model("flux")
    assert read_marker(folder) == {"family": "flux", "seed": 0, "format": 1}
    weights = sorted(folder.rglob("*.safetensors"))
    before = {p: p.stat().st_mtime_ns for p in weights}
    assert save_tiny_model("flux", folder) == folder
    assert {p: p.stat().st_mtime_ns for p in weights} == before
    assert [p.name for p in folder.parent.iterdir() if "staging" in p.name] == []


def test_save_refuses_an_occupied_folder(tmp_path, tiny_model):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(ModelSourceError, match="already exists"):
        save_tiny_model("flux", foreign)
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    with pytest.raises(ModelSourceError, match="seed 1"):
        save_tiny_model("flux", tiny_model("flux"), seed=1)  # same family, other seed
    with pytest.raises(ModelSourceError):
        save_tiny_model("sdxl", tiny_model("flux"))
    assert json.loads((tiny_model("flux") / MARKER_FILE).read_text())["family"] == "flux"


def test_save_fills_an_empty_folder(tmp_path):
    target = tmp_path / "empty"
    target.mkdir()
    assert save_tiny_model("z-image", target) == target
    assert read_marker(target)["family"] == "z-image"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


def test_a_failed_write_leaves_nothing_behind(tmp_path):
    def fill(staging: Path) -> None:
        (staging / "model_index.json").write_text("{}")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        publish_dir(tmp_path / "model", fill, lambda folder: False)
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_place_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ModelSourceError, match="cannot write"):
        save_tiny_model("flux", blocker / "tiny-flux")
    assert blocker.read_text() == "not a folder"


def _racing_fill(target: Path, content: str):
    """A fill during which another writer publishes `target` with `content` first."""

    def fill(staging: Path) -> None:
        (staging / "a.txt").write_text("mine")
        target.mkdir()
        (target / "a.txt").write_text(content)

    return fill


def test_losing_a_race_to_the_same_content_is_fine(tmp_path):
    target = tmp_path / "model"
    same = _racing_fill(target, "mine")
    assert publish_dir(target, same, lambda f: (f / "a.txt").read_text() == "mine") is False
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_losing_a_race_to_other_content_is_an_error(tmp_path):
    target = tmp_path / "model"
    with pytest.raises(FileExistsError):
        publish_dir(target, _racing_fill(target, "theirs"), lambda f: (f / "a.txt").read_text() == "mine")
    assert (target / "a.txt").read_text() == "theirs"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
