"""families/qwen_edit_render.py: QwenImageEditPlusPipeline's own __call__ with each reference
VAE-encoded at the size handed (RELIABILITY 1490): two references of different sizes are encoded
at theirs, in slot order, and the transformer is told those shapes (img_shapes: the references'
RoPE positions); the pipeline class itself is untouched (a plain call still sizes to ~1 MP), and a
pipeline that does not size its references through calculate_dimensions is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from lorastudio.families.qwen_edit_render import ReferenceSizingError, render_at_handed_sizes


def test_plus_encodes_each_reference_at_its_handed_size(monkeypatch) -> None:
    from diffusers import AutoencoderKLQwenImage
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit_plus as plus

    from lorastudio.tiny.qwen_edit import build_qwen_image_edit

    pipe = build_qwen_image_edit(0, plus=True, zero_cond_t=True)
    pipe.set_progress_bar_config(disable=True)
    seen: list[tuple[int, int]] = []
    original = AutoencoderKLQwenImage.encode

    def encode(self, x, *args, **kwargs):
        seen.append((x.shape[-1], x.shape[-2]))  # x [1, 3, 1, H, W]
        return original(self, x, *args, **kwargs)

    monkeypatch.setattr(AutoencoderKLQwenImage, "encode", encode)
    shapes: list = []
    pipe.transformer.register_forward_pre_hook(
        lambda _m, _a, kw: shapes.append(kw["img_shapes"]), with_kwargs=True
    )
    rng = np.random.default_rng(0)
    refs = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in ((64, 64), (32, 48))]
    out = render_at_handed_sizes(pipe)(
        image=refs, prompt="a", width=32, height=32, num_inference_steps=2,
        generator=torch.Generator("cpu").manual_seed(0), output_type="np",
    )  # fmt: skip
    assert out.images.shape == (1, 32, 32, 3)
    assert seen[:2] == [(64, 64), (32, 48)]  # then the decode's own encode-free path
    assert shapes[0] == [[(1, 2, 2), (1, 4, 4), (1, 3, 2)]]  # target, then each reference (h, w) / 16
    assert plus.VAE_IMAGE_SIZE == 1024 * 1024 and plus.calculate_dimensions.__module__ == plus.__name__


def test_a_pipeline_not_sizing_through_calculate_dimensions_is_refused() -> None:
    class Other:
        def __call__(self, image=None):
            return image

    with pytest.raises(ReferenceSizingError, match="Other.__call__ does not size its references"):
        render_at_handed_sizes(Other())
