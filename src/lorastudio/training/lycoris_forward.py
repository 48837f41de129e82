"""LoHa / LoKr layers whose forward Dynamo can trace whole.

peft's LycorisLayer forward (LoHa and LoKr, peft 0.17-0.22) decides per layer and per call
whether to add the adapter's output with `torch.rand(1) > module_dropout`, module dropout or not:
a data-dependent branch. Dynamo cannot trace it (`Unsupported: Data-dependent branching`), so
the ordinary compile breaks each block's graph at every adapted layer, and the saved block graphs
(training/precompile.py, one whole graph per block class) were refused for every LoHa / LoKr run:
measured on an H100 in session 38 (`bench.precompile_families --set adapter=lokr`: five families,
nothing saved, each block class "goes to the ordinary compile"; the DoRA set saved and loaded).
lorastudio never sets module dropout (the config has no such field; imports refuse it), so the
draw decides nothing: `rand(1) > 0` is true but for a draw of exactly 0.

`trace_friendly_lycoris` moves each LoHa / LoKr layer to a subclass of its class (one per class,
named `_traced_<module>_<class>` and kept as a global of this module so that pickle finds it by
reference, which Dynamo's saved guards need, as training/compile_trace.py does for attention
processors) whose forward adds every active adapter's output without the draw, and otherwise
defers to peft's: adapters disabled (training/preservation.py flips that flag) or merged, or any
active adapter with module dropout above 0 in training. The sums are the same operations in the
same order, so outputs and gradients are bitwise peft's; the one difference is that the global
CPU generator is no longer drawn once per layer and step (nothing of a run reads that stream
after the adapter's initialisation: noise, timesteps and data order have their own generators).
No library offers this: peft's forward is written for module dropout, which it always samples.
"""

from __future__ import annotations

from typing import Any

import torch

TRACED_ATTR = "_lorastudio_traced_forward"


class _NoDrawForward:
    """The forward mixed in front of a peft LycorisLayer class (see the module)."""

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        layer: Any = self
        active = [a for a in layer.active_adapters if a in layer._available_adapters]
        if (
            layer.disable_adapters
            or layer.merged
            or (layer.training and any(layer.module_dropout[a] for a in active))
        ):
            return super().forward(x, *args, **kwargs)  # type: ignore[misc]
        previous_dtype = x.dtype
        result = layer.base_layer(x, *args, **kwargs)
        for adapter in active:
            result = result + layer._get_delta_activations(adapter, x, *args, **kwargs)
        return result.to(previous_dtype)


_TRACED: dict[type, type] = {}


def _traced_class(cls: type) -> type:
    """The subclass of LycorisLayer class `cls` with the draw-free forward (one per class)."""
    if cls not in _TRACED:
        qualname = "_traced_" + "_".join(f"{cls.__module__}.{cls.__qualname__}".replace("<", "").split("."))
        traced = type(qualname, (_NoDrawForward, cls), {TRACED_ATTR: True})
        traced.__module__ = __name__
        globals()[qualname] = traced
        _TRACED[cls] = traced
    return _TRACED[cls]


def trace_friendly_lycoris(model: torch.nn.Module) -> int:
    """Give every LoHa / LoKr layer of `model` the draw-free forward (see the module).
    Idempotent; returns how many layers this call changed (0 for LoRA / DoRA models)."""
    from peft.tuners.lycoris_utils import LycorisLayer

    changed = 0
    for module in model.modules():
        cls = type(module)
        if not isinstance(module, LycorisLayer) or getattr(cls, TRACED_ATTR, False):
            continue
        module.__class__ = _traced_class(cls)
        changed += 1
    return changed
