"""Selective activation checkpointing of a LoKr / LoHa run (training/planning/memory.py): the small fp32
matmuls of the factored deltas (training/adapters/lycoris_grad.py) are recomputed like LoRA's up-projection,
not kept beside the base layers' outputs (RELIABILITY 2160)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from memory_cases import RES, tiny_pipe

from lorastudio import families
from lorastudio.training.adapters.lora import add_lora, lora_config_for
from lorastudio.training.planning import memory


def _nbytes(tree: Any) -> int:
    """The bytes of the distinct tensor storages in `tree` (an op's output, a list / tuple of them)."""
    seen: dict[int, int] = {}
    stack = [tree]
    while stack:
        item = stack.pop()
        item = getattr(item, "val", item)  # torch's _VersionWrapper around a kept output
        if isinstance(item, torch.Tensor):
            seen[item.untyped_storage().data_ptr()] = item.untyped_storage().nbytes()
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return sum(seen.values())


def _kept_bytes(adapter: str, monkeypatch: pytest.MonkeyPatch, enabled: bool) -> int:
    """The bytes the selective policy keeps (its cache) over one forward of the tiny FLUX.1
    denoiser with a `adapter` on its attention and MLP layers, the adapter `enabled` or not."""
    pipe, cfg, cond = tiny_pipe("flux")
    family = families.get("flux")
    cfg = cfg.model_copy(update={"adapter": adapter, "lora_rank": 2, "lora_alpha": 2.0})
    denoiser = copy.deepcopy(pipe.transformer).train()
    torch.manual_seed(0)
    for p in add_lora(denoiser, lora_config_for(cfg, family.spec.lora_targets)):
        with torch.no_grad():
            p.normal_(std=0.05)
    for m in denoiser.modules():
        if hasattr(m, "enable_adapters") and hasattr(m, "base_layer"):
            m.enable_adapters(enabled)
    caches: list[dict[Any, dict[int, Any]]] = []
    real = memory.create_selective_checkpoint_contexts

    def recording(policy: Any) -> Any:
        contexts = real(policy)
        caches.append(contexts[0].storage)  # the caching mode's kept outputs
        return contexts

    monkeypatch.setattr(memory, "create_selective_checkpoint_contexts", recording)
    assert memory.apply_checkpointing(denoiser, "selective") == []
    latents = torch.randn(
        2, family.spec.latent_channels, RES // 8, RES // 8, requires_grad=True
    )  # [B, C, h, w]
    info = {"original_size": [(RES, RES)] * 2, "crop_top_left": [(0, 0)] * 2, "target_size": (RES, RES)}
    pred = family.predict(denoiser, latents, torch.full((2,), 0.5), cond, info, cfg)
    assert caches and pred.requires_grad
    return sum(_nbytes(out) for cache in caches for outs in cache.values() for out in outs.values())


@pytest.mark.parametrize("adapter", ["lokr", "loha"])
def test_selective_checkpointing_recomputes_the_factored_deltas_small_matmuls(
    adapter: str, monkeypatch: pytest.MonkeyPatch
):
    """memory.lora_rank read only LoRA's lora_A: under a LoKr / LoHa run the policy's cheap inner
    dimension was 0, so every matmul of the factored deltas was MUST_SAVE: LoKr's two fp32
    intermediates per layer (each as large as the layer's input or output), LoHa's [..., out]
    product, kept beside the base layers' outputs. Now the block keeps what the same block keeps
    with its adapter off, plus LoHa's small [..., r1*r2] projections (LoRA's lora_A output's kin)."""
    base = _kept_bytes(adapter, monkeypatch, enabled=False)
    kept = _kept_bytes(adapter, monkeypatch, enabled=True)
    # tiny FLUX.1, rank 2: 149 kB kept without the adapter; the old code kept LoKr +106 kB, LoHa
    # +58 kB; now LoKr +0, LoHa +6.4 kB (the [rows, 4] projections; a LoRA of rank 2: +3.2 kB)
    assert kept - base <= (0 if adapter == "lokr" else base // 16), (base, kept)


@pytest.mark.parametrize(("factor", "cheap"), [(-1, 8), (4, 16), (16, 16), (64, 1)])
def test_the_cheap_inner_dimension_never_reaches_a_base_layers_own(factor: int, cheap: int):
    """memory.adapter_inner_dim: the LoKr factors' inner dimensions (w1 [a, a_in], w2 or its
    product's [r, b_in]), only those below every adapted layer's own inner dimension (64 here): a
    lokr_factor of 64 leaves w1 64 x 64, whose matmul is as wide as the base layer's and stays
    kept, as every base matmul does; LoHa's r1 * r2."""
    from peft import LoHaConfig, LoKrConfig, inject_adapter_in_model

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 128))
    config = LoKrConfig(r=2, alpha=2, target_modules=["0", "1"], decompose_factor=factor)
    assert memory.adapter_inner_dim(inject_adapter_in_model(config, model)) == cheap
    loha = inject_adapter_in_model(
        LoHaConfig(r=2, alpha=2, target_modules=["0"]), torch.nn.Sequential(torch.nn.Linear(64, 64))
    )
    assert memory.adapter_inner_dim(loha) == 4  # r1 * r2
