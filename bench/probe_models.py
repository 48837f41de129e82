"""The model changes of bench/probe_speed.py's variants: the fp8 swap of the frozen linears
after the LoRA (`fp8`, `fp8ao`) and the before-LoRA fusions of the projections (`fq`, `fb`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _after(
    before: Callable[[Any], Any] | None, change: Callable[[Any], dict[str, Any]]
) -> Callable[[Any], Any]:
    """A before-LoRA hook that runs `before` (when given), then `change`; returns change's
    counts with before's notes under "before"."""

    def hook(model: Any) -> dict[str, Any]:
        notes = before(model) if before is not None else None
        return {**change(model), "before": notes}

    return hook


def convert_fp8(model: Any, kind: str) -> dict[str, int]:
    """Swap the frozen linears inside the repeated blocks (after add_lora: peft's base layers and
    the plain linears) for fp8 ones; returns counts of converted / skipped linears."""
    import torch

    from lorastudio.training.speed.compile import repeated_blocks
    from lorastudio.training.speed.fp8 import Fp8FrozenLinear

    done = skipped = 0
    for block in repeated_blocks(model):
        for parent in list(block.modules()):
            for child_name, child in list(parent.named_children()):
                if not isinstance(child, torch.nn.Linear) or child.weight.requires_grad:
                    continue
                if getattr(child, "fused_slice", False):  # `fb`: its group's holder is converted
                    continue
                if "lora_" in child_name or child.in_features % 16 or child.out_features % 16:
                    skipped += 1
                    continue
                if kind == "fp8":
                    setattr(parent, child_name, Fp8FrozenLinear(child))
                done += 1
    if kind == "fp8ao":
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        blocks = set(map(id, repeated_blocks(model)))

        def keep(mod: Any, fqn: str) -> bool:
            return (
                isinstance(mod, torch.nn.Linear)
                and not mod.weight.requires_grad
                and "lora_" not in fqn
                and mod.in_features % 16 == 0
                and mod.out_features % 16 == 0
            )

        for block in repeated_blocks(model):
            if id(block) in blocks:
                convert_to_float8_training(
                    block, config=Float8LinearConfig.from_recipe_name("rowwise"), module_filter_fn=keep
                )
    torch.cuda.empty_cache()
    return {"fp8_linears": done, "kept": skipped}


def fused_projections(family: str, before: Any, baseline_targets: bool) -> tuple[Any, tuple[str, ...]]:
    """The `fq` variant: a before-LoRA hook (running `before` first when given) that fuses every
    FluxAttention's q/k/v (and added q/k/v) projections with diffusers' `fuse_projections` and
    drops the separate linears, and the LoRA targets on the fused ones. FLUX.1 only."""
    if family != "flux":
        raise ValueError("fq (fused q/k/v projections) is a FLUX.1 probe")

    def fuse(model: Any) -> dict[str, Any]:
        import torch
        from diffusers.models.transformers.transformer_flux import FluxAttention

        fused = 0
        for module in model.modules():
            if isinstance(module, FluxAttention):
                module.fuse_projections()
                for name in ("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj"):
                    if getattr(module, name, None) is not None:
                        setattr(module, name, None)  # the fused linear holds these weights now
                fused += 1
        model.requires_grad_(False)
        torch.cuda.empty_cache()
        return {"fused_attention_modules": fused}

    targets = (
        ("to_qkv", "to_out.0") if baseline_targets else ("to_qkv", "to_added_qkv", "to_out.0", "to_add_out")
    )
    return _after(before, fuse), targets


QKV = ("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj")  # `fbq`'s group members


def fused_base(family: str, before: Any, qkv_only: bool = False) -> Any:
    """The `fb` variant: a before-LoRA hook (running `before` first when given) that fuses the
    transformer's same-input frozen projections as the engine does (fuse_projections on:
    training/speed/fused_projections.py, the family's declared groups). qkv_only (`fbq`): only the
    attention q/k/v members of each group (FLUX.1's single blocks fuse q/k/v without proj_mlp;
    Z-Image's SwiGLU w1/w3 stay separate)."""
    from bench.models import FAMILY_KEYS
    from lorastudio import families

    groups = dict(families.get(FAMILY_KEYS[family]).spec.fused_projection_groups)
    if qkv_only:  # each group's q/k/v members (FLUX.1's single blocks: without proj_mlp)
        reduced = {
            block: tuple(kept for g in members if len(kept := tuple(n for n in g if n.endswith(QKV))) > 1)
            for block, members in groups.items()
        }
        groups = {block: members for block, members in reduced.items() if members}
    if not groups:
        raise ValueError(f"fb: no projection groups to fuse for {family}")

    def fuse(model: Any) -> dict[str, Any]:
        from lorastudio.training.speed.fused_projections import fuse_projections

        return {"fused_groups": fuse_projections(model, groups)}

    return _after(before, fuse)
