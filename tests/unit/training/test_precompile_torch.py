"""What the saved block graphs need of torch that differs between its versions
(training/speed/precompile_torch.py), checked on this host's torch with the other version's behaviour
put in place: torch 2.11's pickling of a guard on a default argument."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from lorastudio.training.speed import precompile

pytestmark = pytest.mark.skipif(
    precompile.torch_cannot_precompile() is not None, reason="this torch has no aot_compile"
)
# aot_eager where this torch can save its output (2.13); Inductor on torch 2.11
BACKEND = "aot_eager" if "aot_eager" in precompile.saved_backends() else "inductor"


class Scale(torch.nn.Module):
    """A submodule whose forward has a default argument, as diffusers' norms and attention have."""

    def forward(self, x: torch.Tensor, factor: float = 0.5) -> torch.Tensor:
        return x * factor  # [B, D]


class DefaultsBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.scale = Scale()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale(self.proj(x))  # [B, D]: Scale.forward inlined, its default guarded


def _torch_211_reduce(self: object) -> tuple[type, tuple]:
    """torch 2.11's `_guards.dataclass_with_cached_hash.__reduce__`: every field, init=False too."""
    return (type(self), tuple(getattr(self, f.name) for f in dataclasses.fields(self)))


def test_a_guard_on_a_default_argument_saves_a_file_that_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """torch 2.11 pickled a DefaultsSource with its two computed fields, which its loader passes
    to the constructor ("DefaultsSource.__init__() takes from 3 to 4 positional arguments but 6
    were given"): no tiny FLUX.1 block saved on 2.11 loaded. With 2.11's pickling in place, a
    block that inlines a default argument saves a file that loads and gives the block's output."""
    from torch._dynamo.source import DefaultsSource

    monkeypatch.setattr(DefaultsSource, "__reduce__", _torch_211_reduce)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch._dynamo.reset()
    torch.manual_seed(0)
    block = DefaultsBlock()
    x = torch.randn(2, 8)  # [B, D]
    fn = precompile.trace_function(block, (x,), {}, {"backend": BACKEND, "dynamic": None})
    assert DefaultsSource.__reduce__ is _torch_211_reduce  # put back after the trace
    precompile.save_function(fn, tmp_path / "block.bin")
    loaded = precompile.load_function(tmp_path / "block.bin", DefaultsBlock.forward.__globals__)
    assert loaded.guard_check(block, x)
    torch.testing.assert_close(loaded.fn(block, x), block(x))
