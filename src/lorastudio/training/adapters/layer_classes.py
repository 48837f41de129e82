"""A peft layer's class swapped for a subclass with another forward, in place (no new module, the
same parameters and state dict): training/adapters/lycoris_forward.py's draw-free LoHa / LoKr forward and
training/adapters/lora_saved.py's kept-input LoRA forward. Each subclass is made once per (class, mixin)
and set as a global of its home module under a name derived from the class's, so a model that
holds one pickles by reference (the saved Dynamo graphs and torch.save of a module need it).
Written by hand: peft has no hook to change a built layer's forward."""

from __future__ import annotations

from types import ModuleType

import torch

_MADE: dict[tuple[type, type], type] = {}


def mixed_class(cls: type, mixin: type, marker: str, prefix: str, home: ModuleType) -> type:
    """The subclass (mixin, cls) marked `marker = True`, named `prefix` + cls's dotted path and
    kept as a global of `home` (one per (cls, mixin))."""
    key = (cls, mixin)
    if key not in _MADE:
        name = prefix + "_".join(f"{cls.__module__}.{cls.__qualname__}".replace("<", "").split("."))
        made = type(name, (mixin, cls), {marker: True})
        made.__module__ = home.__name__
        setattr(home, name, made)
        _MADE[key] = made
    return _MADE[key]


def swap_layer_classes(
    model: torch.nn.Module, layer_type: type, mixin: type, marker: str, prefix: str, home: ModuleType
) -> int:
    """Give every `layer_type` module of `model` not yet marked `marker` its mixed class
    (mixed_class). Idempotent; returns how many modules this call changed."""
    changed = 0
    for module in model.modules():
        cls = type(module)
        if not isinstance(module, layer_type) or getattr(cls, marker, False):
            continue
        module.__class__ = mixed_class(cls, mixin, marker, prefix, home)
        changed += 1
    return changed
