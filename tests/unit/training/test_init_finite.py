"""RELIABILITY 1680: an init_lora file of finite values whose layer change is not finite in
float32 (lora_up and lora_down of 1e20 each: up @ down = 4e40 at rank 4) is refused at load
naming the file and the layer, for a plain LoRA file (kohya layout) and a LoHa file; before, it
loaded and the run met the divergence guard, which blamed the learning rate. The bound that
spares ordinary files the product (training/adapters/init_finite.bound) is checked against the product."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from lorastudio import families
from lorastudio.errors import ModelSourceError
from lorastudio.training.adapters.init_finite import F32_MAX, bound, lora_change_finite
from lorastudio.training.adapters.init_lora import InitSource, load_init_lora
from lorastudio.training.adapters.init_lora_rules import file_sha256

LAYER = "lora_unet_double_blocks_0_img_attn_proj"  # FLUX.1's transformer_blocks.0.attn.to_out.0
RANK = 4


def _parts(adapter: str, d: int, big: float) -> dict[str, torch.Tensor]:
    if adapter == "lora":
        return {"lora_up.weight": torch.full((d, RANK), big), "lora_down.weight": torch.full((RANK, d), big)}
    return {
        "hada_w1_a": torch.full((d, RANK), big), "hada_w1_b": torch.full((RANK, d), big),
        "hada_w2_a": torch.full((d, RANK), 1.0), "hada_w2_b": torch.full((RANK, d), 1.0),
    }  # fmt: skip


@pytest.mark.parametrize("adapter", ["lora", "loha"])
def test_a_file_whose_change_overflows_is_refused_naming_the_layer(
    make_config, tiny_model, tmp_path, adapter
):
    from lorastudio.training.adapters.lora import add_lora, lora_config_for

    family = families.get("flux")
    denoiser = family.load_denoiser(str(tiny_model("flux")), None, torch.float32, torch.device("cpu"))
    d = int(denoiser.transformer_blocks[0].attn.to_out[0].weight.shape[0])
    add_lora(
        denoiser,
        lora_config_for(
            make_config(adapter=adapter, lora_rank=RANK, lora_alpha=4.0), family.spec.lora_targets
        ),
    )
    for big, name in ((1.0, "fits"), (1e20, "overflows")):  # the same file at 1.0 loads
        path = tmp_path / f"{adapter}-{name}.safetensors"
        tensors = {f"{LAYER}.{k}": v for k, v in _parts(adapter, d, big).items()}
        tensors[f"{LAYER}.alpha"] = torch.tensor(float(RANK))
        save_file(tensors, str(path), metadata={"ss_network_dim": str(RANK)})
        source = InitSource(path, file_sha256(path))
        if big == 1.0:
            assert load_init_lora(denoiser, source, "flux", adapter).loaded == 1
            continue
        with pytest.raises(
            ModelSourceError, match=rf"{path.name}: its layer .*attn.to_out.0's change .* past what float32"
        ):
            load_init_lora(denoiser, source, "flux", adapter)
    assert all(bool(torch.isfinite(p).all()) for p in denoiser.parameters())  # nothing of it copied


def test_the_bound_holds_and_decides_only_where_the_product_is_needed():
    g = torch.Generator().manual_seed(0)
    up, down = torch.randn(16, 4, generator=g), torch.randn(4, 24, generator=g)  # [out, r], [r, in]
    product = (up.double() @ down.double()).abs().max()
    assert float(product) * 3.0 <= bound(up, down, -3.0)
    assert lora_change_finite(up, down, 1.0)
    # a bound past float32 whose product fits (signs cancel): built and found finite
    up, down = torch.tensor([[1.5e19, 1.5e19]]), torch.tensor([[1.5e19], [-1.5e19]])
    assert bound(up, down, 1.0) > F32_MAX and lora_change_finite(up, down, 1.0)
    assert not lora_change_finite(torch.tensor([[1e20]]), torch.tensor([[1e20]]), 1.0)
