"""Contract: gradient checkpointing changes memory, never the maths. For every registered family,
`predict` through the denoiser's own checkpointed path (what gradient_checkpointing = full /
selective uses) gives the prediction and the input gradient of the plain path, on a padded
prompt (a family whose checkpointed path dropped its text mask would fail here)."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from family_sides import RES, config_side
from lorastudio import families
from lorastudio.config import TrainConfig, resolve_train_config


@pytest.mark.parametrize("family", families.names())
def test_a_checkpointed_prediction_equals_the_plain_one(family, tiny_model):
    fam = families.get(family)
    base = str(tiny_model(family))
    extra = {"max_sequence_length": 24} if "max_sequence_length" in fam.spec.supports else {}
    cfg = resolve_train_config(
        TrainConfig(
            family=family, base_model=base, data_dir="unused", resolution=config_side(family), **extra
        )
    )
    dev, dt = torch.device("cpu"), torch.float32
    n_controls = min(fam.source_control_images(base)[1], 2)  # up to 2 the tiny checkpoint's flavour takes
    seen = {"controls": [[Image.new("RGB", (RES, RES), "gray")] * n_controls]}  # the prompt sees them
    cond = fam.collate_conditioning(
        fam.encode_prompts(
            fam.load_text_encoders(base, None, dt, dev),
            ["a red circle"],
            cfg,
            **(seen if fam.spec.prompt_sees_controls else {}),
        )
    )
    denoiser = fam.load_denoiser(base, None, dt, dev)
    h = w = RES // fam.spec.vae_scale_factor
    noisy = torch.randn(1, fam.spec.latent_channels, h, w, generator=torch.Generator().manual_seed(0))
    level = torch.tensor([500]) if fam.spec.objective == "ddpm" else torch.tensor([0.6])
    info = {"original_size": [(RES, RES)], "crop_top_left": [(0, 0)], "target_size": (RES, RES)}
    if n_controls:  # an edit family's reference latents: [1, K, C, h, w]
        g = torch.Generator().manual_seed(1)
        info["controls"] = torch.randn(1, n_controls, fam.spec.latent_channels, h, w, generator=g)

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        x = noisy.clone().requires_grad_(True)
        out = fam.predict(denoiser, x, level, cond, info, cfg)
        out.square().mean().backward()
        return out.detach(), x.grad

    plain, plain_grad = run()
    denoiser.enable_gradient_checkpointing()
    checkpointed, checkpointed_grad = run()
    torch.testing.assert_close(checkpointed, plain, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(checkpointed_grad, plain_grad, rtol=1e-5, atol=1e-6)
