"""The run's adapters are peft's own (session 37 methods audit): `add_lora(lora_config_for(cfg))`
on the tiny FLUX.1 transformer gives, for DoRA, LoHa and LoKr (square factors, and factor 4 with
both factors low-rank), the same initial adapter tensors as peft's `inject_adapter_in_model` of
the same config under the same seed, and after the same perturbation of every adapter tensor
(so the adapter is no longer a no-op) the same output and the same gradient of each, bitwise
(LoKr, and LoHa at rank 2: within fp rounding, their outputs taken from their factors without
the full weight, training/adapters/lycoris_forward.py, RELIABILITY 1950 and 1990; LoHa at rank 4 on the
tiny 32 x 32 projections keeps peft's delta, 16 * 64 not being below 32 * 32, and stays bitwise)."""

from __future__ import annotations

import copy

import pytest
import torch
from diffusers import FluxTransformer2DModel
from peft import inject_adapter_in_model

from lorastudio import families
from lorastudio.config import TrainConfig
from lorastudio.tiny.parts import FLUX1_DIT
from lorastudio.training.adapters.lora import add_lora, lora_config_for

TRAINED = ("lora_", "hada_", "lokr_")


def _inputs(model: FluxTransformer2DModel) -> dict:
    g = torch.Generator().manual_seed(1)
    cfg = model.config
    return {
        "hidden_states": torch.randn(1, 16, cfg.in_channels, generator=g),
        "encoder_hidden_states": torch.randn(1, 8, cfg.joint_attention_dim, generator=g),
        "pooled_projections": torch.randn(1, cfg.pooled_projection_dim, generator=g),
        "timestep": torch.tensor([0.5]),
        "img_ids": torch.zeros(16, 3),
        "txt_ids": torch.zeros(8, 3),
        "guidance": torch.tensor([1.0]),
    }


@pytest.mark.parametrize(
    "settings",
    [
        {"adapter": "dora"},
        {"adapter": "loha"},
        {"adapter": "loha", "lora_rank": 2},
        {"adapter": "lokr"},
        {"adapter": "lokr", "lokr_factor": 4, "lokr_decompose_both": True},
    ],
    ids=["dora", "loha", "loha-rank2", "lokr", "lokr-factor4-both"],
)
def test_our_adapter_layers_are_peft_s_init_output_and_gradients(settings: dict) -> None:
    torch.manual_seed(0)
    base = FluxTransformer2DModel(**FLUX1_DIT, pooled_projection_dim=32, guidance_embeds=True)
    cfg = TrainConfig.model_validate(
        {
            "family": "flux",
            "base_model": "/unused",
            "data_dir": "/unused",
            "lora_rank": 4,
            "lora_alpha": 8,
            **settings,
        }
    )
    config = lora_config_for(cfg, families.get("flux").spec.lora_targets)
    ours = copy.deepcopy(base)
    torch.manual_seed(3)
    add_lora(ours, config)
    torch.manual_seed(3)
    ref = inject_adapter_in_model(copy.deepcopy(config), copy.deepcopy(base))
    mine, theirs = dict(ours.named_parameters()), dict(ref.named_parameters())
    names = sorted(n for n in theirs if any(k in n for k in TRAINED))
    assert names and names == sorted(n for n, p in mine.items() if p.requires_grad)
    assert all(torch.equal(mine[n], theirs[n]) for n in names)  # the same initial tensors
    g = torch.Generator().manual_seed(9)
    with torch.no_grad():
        for name in names:
            step = 0.05 * torch.randn(theirs[name].shape, generator=g)  # [same shape as the tensor]
            mine[name].add_(step)
            theirs[name].add_(step)
    for name in names:
        theirs[name].requires_grad_(True)
    x = _inputs(base)
    out, want = ours(**x).sample, ref(**x).sample  # [1, 16, 64]
    assert not torch.equal(out, base(**x).sample)  # the perturbed adapter changes the output
    # the same sums in another order: LoKr, LoHa where its Khatri-Rao factors are cheaper (rank 2)
    factored = settings["adapter"] == "lokr" or settings.get("lora_rank") == 2
    if factored:
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)
    else:
        assert torch.equal(out, want)
    out.square().mean().backward()
    want.square().mean().backward()
    for n in names:
        if factored:
            torch.testing.assert_close(mine[n].grad, theirs[n].grad, rtol=1e-4, atol=1e-7)
        else:
            assert torch.equal(mine[n].grad, theirs[n].grad), n
