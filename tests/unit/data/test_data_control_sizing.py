"""data/control_sizing.py against the diffusers 0.42.1 pipelines it mirrors: the size each edit
pipeline encodes a reference at, and the pixels it hands its VAE, on the same images."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from lorastudio import families
from lorastudio.data.control_sizing import KONTEXT_RESOLUTIONS, control_size, load_control_sized, rule_label

SIZES = [(64, 96), (97, 64), (1500, 700), (2048, 2048), (300, 1200)]  # (width, height)


def _image(tmp_path, size):
    rng = np.random.default_rng(size[0] * 7 + size[1])
    path = tmp_path / f"c{size[0]}x{size[1]}.png"
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path)
    return path


def _qwen_plus(img):
    from diffusers.image_processor import VaeImageProcessor
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit as edit
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit_plus as plus

    w, h = plus.calculate_dimensions(plus.VAE_IMAGE_SIZE, img.width / img.height)
    assert (w, h, None) == edit.calculate_dimensions(1024 * 1024, img.width / img.height)  # the same rule
    return VaeImageProcessor(vae_scale_factor=16).preprocess(img, h, w)[0]  # [3, H, W]


def _kontext(img):
    from diffusers.image_processor import VaeImageProcessor
    from diffusers.pipelines.flux.pipeline_flux_kontext import PREFERRED_KONTEXT_RESOLUTIONS

    processor = VaeImageProcessor(vae_scale_factor=16)  # FluxKontextPipeline's (8 * 2)
    height, width = processor.get_default_height_width(img)  # __call__'s step 3, _auto_resize on
    ratio = width / height
    _, width, height = min((abs(ratio - w / h), w, h) for w, h in PREFERRED_KONTEXT_RESOLUTIONS)
    resized = processor.resize(img, height // 16 * 16, width // 16 * 16)
    return processor.preprocess(resized, height // 16 * 16, width // 16 * 16)[0]


def _flux2(img):
    from diffusers.pipelines.flux2.image_processor import Flux2ImageProcessor

    processor = Flux2ImageProcessor(vae_scale_factor=16)
    if img.width * img.height > 1024 * 1024:  # Flux2Pipeline.__call__'s step 4
        img = processor._resize_to_target_area(img, 1024 * 1024)
    w, h = img.width // 16 * 16, img.height // 16 * 16
    return processor.preprocess(img, height=h, width=w, resize_mode="crop")[0]


@pytest.mark.parametrize(
    ("family", "reference"), [("qwen-image-edit", _qwen_plus), ("flux-kontext", _kontext), ("flux2", _flux2)]
)
@pytest.mark.parametrize("size", SIZES)
def test_pipeline_rule_is_the_pipelines_size_and_pixels(tmp_path, family, reference, size):
    sizing = families.get(family).spec.control_sizing
    path = _image(tmp_path, size)
    with Image.open(path) as img:
        expected = reference(img.convert("RGB")).numpy()  # [3, H, W] in [-1, 1]
    got_size = control_size(sizing, "pipeline", *size)
    assert got_size == (expected.shape[2], expected.shape[1])
    pixels = load_control_sized(path, got_size, sizing, flip=False)
    np.testing.assert_allclose(pixels, expected, rtol=0, atol=1e-6)
    flipped = load_control_sized(path, got_size, sizing, flip=True)
    np.testing.assert_array_equal(flipped, pixels[:, :, ::-1])


def test_kontext_resolutions_are_the_pipelines():
    from diffusers.pipelines.flux.pipeline_flux_kontext import PREFERRED_KONTEXT_RESOLUTIONS

    assert list(KONTEXT_RESOLUTIONS) == list(PREFERRED_KONTEXT_RESOLUTIONS)


def test_target_and_int_rules():
    qwen = families.get("qwen-image-edit").spec.control_sizing
    flux2 = families.get("flux2").spec.control_sizing
    kontext = families.get("flux-kontext").spec.control_sizing
    assert control_size(qwen, "target", 640, 480) is None  # the target's bucket
    assert control_size(None, "pipeline", 640, 480) is None  # a family without controls
    assert control_size(qwen, 512, 1024, 1024) == (512, 512)  # the ratio kept at 512 x 512
    assert control_size(qwen, 512, 2000, 1000) == (736, 352)  # round(724.1 / 32), round(362.0 / 32)
    assert control_size(kontext, 512, 1000, 1000) == (512, 512)  # the ratio kept, not the preferred list
    assert control_size(flux2, 512, 300, 200) == (288, 192)  # under the cap: only floored to 16
    assert control_size(flux2, 128, 300, 200) == (144, 96)  # over it: scaled to ~128 x 128, floored
    assert rule_label(qwen, "pipeline") == "pipeline ~1 MP"
    assert rule_label(qwen, 768) == "768x768 area"
    assert rule_label(qwen, "target") == "target bucket"
