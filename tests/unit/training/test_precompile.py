"""Dynamo's saved output for the compiled blocks (training/speed/precompile.py): a second compile of the
same blocks loads the traced, guarded graph instead of tracing, gives the eager loss and
gradients, and anything that does not fit (other inputs, a damaged file, a changed structure)
takes the ordinary compile."""

from __future__ import annotations

import logging
import types
from pathlib import Path

import pytest
import torch

from lorastudio.training.speed import precompile, precompile_key
from lorastudio.training.speed.compile import compile_denoiser, compile_state

pytestmark = pytest.mark.skipif(
    precompile.torch_cannot_precompile() is not None, reason="this torch has no aot_compile"
)
# aot_eager where this torch can save its output (2.13: no C++ compile, the fast case);
# Inductor on torch 2.11, which saves Inductor's output only (precompile.saved_backends)
BACKEND = "aot_eager" if "aot_eager" in precompile.saved_backends() else "inductor"


_SCALED = lambda self, h: torch.nn.functional.linear(h, self.weight, self.bias) * 2  # noqa: E731


class ToyBlock(torch.nn.Module):
    """A repeated block: a LoRA-like trainable low-rank path beside a frozen linear layer."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(dim, dim)
        self.down = torch.nn.Linear(dim, 2, bias=False)
        self.up = torch.nn.Linear(2, dim, bias=False)
        self.proj.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.nn.functional.gelu(self.proj(x) + self.up(self.down(x)))  # [B, N, D]


class ToyDenoiser(torch.nn.Module):
    _repeated_blocks = ["ToyBlock"]

    def __init__(self, dim: int = 8, depth: int = 3) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.ModuleList(ToyBlock(dim) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def _step(model: ToyDenoiser, x: torch.Tensor) -> tuple[float, list[torch.Tensor]]:
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = None
    loss = model(x).square().mean()
    loss.backward()
    return float(loss.detach()), [p.grad.clone() for p in params]


def _compiled(x: torch.Tensor) -> tuple[ToyDenoiser, tuple[float, list[torch.Tensor]]]:
    model = ToyDenoiser()
    params = [p for p in model.parameters() if p.requires_grad]
    compile_denoiser(model, params, backend=BACKEND)
    return model, _step(model, x)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv(precompile.ENV, "1")  # off by default on a CPU
    for name in precompile.COUNTERS:
        monkeypatch.setitem(precompile.COUNTERS, name, 0)
    return tmp_path / "inductor" / precompile.FOLDER


def test_a_second_compile_loads_the_saved_graph_and_gives_the_eager_result(cache: Path):
    torch._dynamo.reset()
    x = torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(1))  # [B, N, D]
    eager_loss, eager_grads = _step(ToyDenoiser(), x)
    _compiled(x)
    assert precompile.COUNTERS["saved"] == 1 and precompile.COUNTERS["hit"] == 0
    assert len(list(cache.glob("*/ToyBlock-*.bin"))) == 1
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    model, (loss, grads) = _compiled(x)  # a fresh model, as a later run has
    assert precompile.COUNTERS["hit"] == 1 and precompile.COUNTERS["saved"] == 1
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == frames  # nothing traced
    assert loss == pytest.approx(eager_loss, rel=1e-6)
    for e, g in zip(eager_grads, grads, strict=True):
        torch.testing.assert_close(g, e)
    assert compile_state(model).active


def _ordinary_traces() -> int:
    """How many frames Dynamo's ordinary path (not aot_compile's) compiled in this process."""
    metrics = torch._dynamo.utils.compilation_time_metrics
    return sum(len(v) for k, v in metrics.items() if str(k).endswith("_compile.compile_inner"))


def test_inputs_the_guards_refuse_take_the_ordinary_compile_after_the_first_step(cache: Path):
    """Each new input signature of the run's first step is traced and saved (a no-grad pass, as
    differential output preservation makes); after it (end_first_step) inputs the saved guards
    refuse take the ordinary compile, with the eager result, and files saved earlier still load."""
    torch._dynamo.reset()
    x = torch.randn(2, 4, 8)  # [B, N, D]
    frames = _ordinary_traces()
    model, _ = _compiled(x)
    for p in model.parameters():
        p.grad = None  # as at a first step's no-grad pass (see the test after this one)
    with torch.no_grad():  # another grad mode: a second signature, traced and saved too
        torch.testing.assert_close(model(x), ToyDenoiser()(x))
    assert precompile.COUNTERS["saved"] == 2 and _ordinary_traces() == frames
    precompile.end_first_step()
    y = x.double()
    for block in model.blocks:
        block.double()
    loss, _ = _step(model, y)  # after the first step: the ordinary compile
    assert loss == pytest.approx(_step(ToyDenoiser().double(), y)[0], rel=1e-9)
    assert precompile.COUNTERS["guard_miss"] >= 1 and _ordinary_traces() > frames
    assert precompile.COUNTERS["saved"] == 2

    torch._dynamo.reset()
    frames = _ordinary_traces()
    model, _ = _compiled(x)  # a later run: loads the first signature's graph
    precompile.end_first_step()
    with torch.no_grad():  # after its first step, but saved by the earlier run: loaded
        torch.testing.assert_close(model(x), ToyDenoiser()(x))
    assert precompile.COUNTERS["hit"] == 2 and precompile.COUNTERS["saved"] == 2
    assert _ordinary_traces() == frames


def test_a_saved_file_that_does_not_load_is_recorded_and_not_traced_again(
    cache: Path, caplog: pytest.LogCaptureFixture
):
    """torch 2.13 saves a parameter's gradient that is not in the guard tree as a placeholder its
    loader cannot assign ("assigned grad expected to be a Tensor or None but got grad of type
    _Missing"): a block traced while its parameters hold gradients saves a file no run can load.
    Each save is loaded once: such a file is removed and recorded, the run goes on with the traced
    graph, and later runs take the ordinary compile for that signature without a trace."""
    torch._dynamo.reset()
    x = torch.randn(2, 4, 8)  # [B, N, D]
    model, _ = _compiled(x)  # its backward leaves gradients on the parameters
    with caplog.at_level(logging.WARNING, logger="lorastudio.training.speed.precompile"), torch.no_grad():
        torch.testing.assert_close(model(x), ToyDenoiser()(x))
    assert "the saved file did not load" in caplog.text
    assert precompile.COUNTERS["saved"] == 1 and len(list(cache.glob("*/ToyBlock-*.bin"))) == 1
    (marker,) = cache.glob("*/ToyBlock-*.refused")
    assert "_Missing" in marker.read_text()
    torch._dynamo.reset()
    model, _ = _compiled(x)  # a later run
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="lorastudio.training.speed.precompile"), torch.no_grad():
        torch.testing.assert_close(model(x), ToyDenoiser()(x))
    assert "refused in an earlier run" in caplog.text and precompile.COUNTERS["saved"] == 1
    assert precompile.COUNTERS["hit"] == 1  # the training signature's file still loads


def test_a_damaged_file_is_traced_again_and_replaced(cache: Path, caplog: pytest.LogCaptureFixture):
    torch._dynamo.reset()
    x = torch.randn(2, 4, 8)  # [B, N, D]
    eager_loss, _ = _step(ToyDenoiser(), x)
    _compiled(x)
    (saved,) = cache.glob("*/ToyBlock-*.bin")
    saved.write_bytes(saved.read_bytes()[:100])
    with caplog.at_level(logging.WARNING, logger="lorastudio.training.speed.precompile"):
        _, (loss, _) = _compiled(x)
    assert "unusable, traced again" in caplog.text
    assert loss == pytest.approx(eager_loss, rel=1e-6)
    assert precompile.COUNTERS["saved"] == 2 and saved.stat().st_size > 100
    _compiled(x)
    assert precompile.COUNTERS["hit"] == 1


def test_another_block_structure_gets_another_key(cache: Path):
    """A hook on a submodule is traced into the graph, and torch drops the guard on the hook's
    identity from a saved function: the key must tell the two apart."""
    torch._dynamo.reset()
    x = torch.randn(2, 4, 8)  # [B, N, D]
    _compiled(x)
    model = ToyDenoiser()
    for block in model.blocks:
        block.proj.register_forward_hook(_double_output)
    eager_loss, _ = _step(model, x)
    compile_denoiser(model, [p for p in model.parameters() if p.requires_grad], backend=BACKEND)
    loss, _ = _step(model, x)
    assert precompile.COUNTERS["hit"] == 0 and precompile.COUNTERS["saved"] == 2
    assert loss == pytest.approx(eager_loss, rel=1e-6)
    assert len({p.parent for p in cache.glob("*/ToyBlock-*.bin")}) == 2


def _double_output(module: torch.nn.Module, args: object, output: torch.Tensor) -> torch.Tensor:
    return output * 2


def test_a_failure_of_the_saved_path_falls_back_to_the_ordinary_compile(
    cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    calls = []

    def refuse(*args: object, **kwargs: object) -> None:
        calls.append(1)
        raise RuntimeError("simulated: Graph breaks are not supported with aot compile")

    monkeypatch.setattr(precompile, "trace_function", refuse)
    torch._dynamo.reset()
    x = torch.randn(2, 4, 8)  # [B, N, D]
    eager_loss, eager_grads = _step(ToyDenoiser(), x)
    with caplog.at_level(logging.WARNING, logger="lorastudio.training.speed.precompile"):
        model, (loss, grads) = _compiled(x)
    assert "goes to the ordinary compile" in caplog.text and precompile.COUNTERS["fallback"] == 1
    assert loss == pytest.approx(eager_loss, rel=1e-6)
    for e, g in zip(eager_grads, grads, strict=True):
        torch.testing.assert_close(g, e)
    assert compile_state(model).active and not list(cache.glob("*/*.bin"))
    (marker,) = cache.glob("*/ToyBlock-*.refused")  # the next runs of this key do not trace for it
    assert "Graph breaks are not supported" in marker.read_text()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="lorastudio.training.speed.precompile"):
        _, (loss, _) = _compiled(x)
    assert len(calls) == 1 and "refused in an earlier run" in caplog.text and "WARNING" not in caplog.text
    assert loss == pytest.approx(eager_loss, rel=1e-6) and precompile.COUNTERS["fallback"] == 1


def test_off_by_the_environment(cache: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(precompile.ENV, "0")
    torch._dynamo.reset()
    _compiled(torch.randn(2, 4, 8))
    assert precompile.COUNTERS["saved"] == 0 and not cache.exists()


def test_on_by_default_for_cuda_only_and_refused_where_compiled_functions_lack_aot_compile(
    cache: Path, monkeypatch: pytest.MonkeyPatch
):
    """Unset, on for a CUDA denoiser (measured there, RESULTS note 49) and off for a CPU one
    (LORASTUDIO_PRECOMPILE=1 turns it on); =0 turns it off for CUDA too; a torch whose compiled
    function has no aot_compile, even asked for it, is refused before any trace."""
    monkeypatch.delenv(precompile.ENV)
    torch._dynamo.reset()
    _compiled(torch.randn(2, 4, 8))  # a CPU denoiser
    assert precompile.COUNTERS["saved"] == 0 and not cache.exists()
    assert "LORASTUDIO_PRECOMPILE=1" in (precompile.precompile_available("cpu") or "")
    assert precompile.precompile_available("cuda") == precompile.torch_cannot_precompile()
    monkeypatch.setenv(precompile.ENV, "0")
    assert "LORASTUDIO_PRECOMPILE=0" in (precompile.precompile_available("cuda") or "")
    monkeypatch.setenv(precompile.ENV, "1")
    assert precompile.precompile_available("cpu") == precompile.torch_cannot_precompile()
    monkeypatch.setattr(torch, "compile", lambda fn, **_: lambda *a, **k: fn(*a, **k))
    assert "no aot_compile" in (precompile.torch_cannot_precompile() or "")


def test_saved_where_torch_attaches_aot_compile_only_when_asked(cache: Path):
    """torch 2.11 attaches `aot_compile` to a compiled function only while
    `torch._dynamo.config.enable_aot_compile` is on, and it is off there by default (2.13: on);
    the GPU host's 2.11 refused every save with "'function' object has no attribute 'aot_compile'"
    (RESULTS note 45). With the flag off, as 2.11 has it, the block is still saved and loaded."""
    torch._dynamo.reset()
    x = torch.randn(2, 4, 8)  # [B, N, D]
    eager_loss, _ = _step(ToyDenoiser(), x)
    with torch._dynamo.config.patch(enable_aot_compile=False):
        assert precompile.torch_cannot_precompile() is None
        _compiled(x)
        assert precompile.COUNTERS["saved"] == 1 and precompile.COUNTERS["fallback"] == 0
        _, (loss, _) = _compiled(x)
        assert torch._dynamo.config.enable_aot_compile is False  # set for the trace only
    assert precompile.COUNTERS["hit"] == 1 and loss == pytest.approx(eager_loss, rel=1e-6)


def test_aot_eager_is_refused_before_a_trace_where_torch_cannot_save_it(
    cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    """torch 2.11's aot_eager output is a plain function that AOTAutograd's bundled entry refuses
    ("expected OutputCode, got <class 'function'>") only after the whole trace: such a torch (no
    AOTEagerOutputCode) takes the ordinary compile for aot_eager at once, with no trace and no
    warning."""
    from torch._dynamo.backends import debugging

    monkeypatch.delattr(debugging, "AOTEagerOutputCode", raising=False)
    assert precompile.saved_backends() == ("inductor",)
    torch._dynamo.reset()
    x = torch.randn(2, 4, 8)  # [B, N, D]
    eager_loss, _ = _step(ToyDenoiser(), x)
    model = ToyDenoiser()
    with caplog.at_level(logging.INFO, logger="lorastudio.training.speed.precompile"):
        compile_denoiser(model, [p for p in model.parameters() if p.requires_grad], backend="aot_eager")
        loss, _ = _step(model, x)
    assert "cannot save the aot_eager backend's output" in caplog.text and "WARNING" not in caplog.text
    assert precompile.COUNTERS["saved"] == 0 and precompile.COUNTERS["fallback"] == 0 and not cache.exists()
    assert loss == pytest.approx(eager_loss, rel=1e-6) and compile_state(model).active


def test_the_key_is_the_same_in_every_process():
    """Dynamo's configuration holds sets, whose order follows the process's string hash seed, and
    objects whose repr has an address: neither may change the key between runs."""
    assert precompile_key._stable_repr({"torch._refs", "torch._prims"}) == precompile_key._stable_repr(
        {"torch._prims", "torch._refs"}
    )
    assert precompile_key._stable_repr([object()]) == precompile_key._stable_repr([object()])
    settings = {"backend": "aot_eager", "dynamic": None}
    first = precompile_key.precompile_key(ToyDenoiser().blocks[0], settings)
    assert precompile_key.precompile_key(ToyDenoiser().blocks[0], settings) == first


def _ordinary_without_a_trace(
    model: ToyDenoiser, x: torch.Tensor, eager_loss: float, caplog: pytest.LogCaptureFixture, reason: str
) -> None:
    """Compile `model` and take one step: `reason` logged (INFO, no warning), nothing saved and
    nothing traced for the saved path, the eager loss."""
    compile_denoiser(model, [p for p in model.parameters() if p.requires_grad], backend=BACKEND)
    with caplog.at_level(logging.INFO, logger="lorastudio.training.speed.precompile"):
        loss, _ = _step(model, x)
    assert reason in caplog.text and "WARNING" not in caplog.text
    assert precompile.COUNTERS["saved"] == 0 and precompile.COUNTERS["fallback"] == 0
    assert loss == pytest.approx(eager_loss, rel=1e-6)


def test_a_block_of_a_class_made_at_run_time_takes_the_ordinary_compile_without_a_trace(
    cache: Path, caplog: pytest.LogCaptureFixture
):
    """block_swap gives a swapped block a subclass made at run time under its class's names
    (block_swap._swapping_class): pickle cannot find it by name, so its guards could never be
    saved; nothing is traced for a save that must fail."""
    torch._dynamo.reset()
    x = torch.randn(2, 4, 8)  # [B, N, D]
    model = ToyDenoiser()
    eager_loss, _ = _step(model, x)
    made = type("ToyBlock", (ToyBlock,), {"__module__": ToyBlock.__module__, "__qualname__": "ToyBlock"})
    for block in model.blocks:
        block.__class__ = made
    assert precompile_key.local_classes(model.blocks[0])
    _ordinary_without_a_trace(model, x, eager_loss, caplog, "classes pickle cannot find by name")
    assert precompile_key.local_classes(ToyDenoiser().blocks[0]) == []


def test_a_changed_source_line_is_traced_again(cache: Path, monkeypatch: pytest.MonkeyPatch, caplog):
    """A saved function names every source line Dynamo traced with its hash: one that hashes
    otherwise now (a library upgraded in place, an edited file) is refused at load, and the block
    is traced again and saved anew."""
    import torch._dynamo.package as package

    torch._dynamo.reset()
    x = torch.randn(2, 4, 8)  # [B, N, D]
    _compiled(x)
    (path,) = cache.glob("*/ToyBlock-*.bin")
    assert precompile.changed_sources(precompile.load_function(path, ToyBlock.forward.__globals__)) == []
    with monkeypatch.context() as patch:
        patch.setattr(package, "_hash_sourcelines", lambda module, first, last: "another hash")
        with pytest.raises(RuntimeError, match="traced source changed since it was saved"):
            precompile.load_function(path, ToyBlock.forward.__globals__)
    real, seen = precompile.changed_sources, []

    def changed_once(fn: object) -> list[str]:  # the file on disk is the stale one, once
        seen.append(1)
        return ["an.edited.module:1"] if len(seen) == 1 else real(fn)

    monkeypatch.setattr(precompile, "changed_sources", changed_once)
    with caplog.at_level(logging.WARNING, logger="lorastudio.training.speed.precompile"):
        _compiled(x)
    assert "traced source changed since it was saved" in caplog.text
    assert precompile.COUNTERS["hit"] == 0 and precompile.COUNTERS["saved"] == 2
    _compiled(x)
    assert precompile.COUNTERS["hit"] == 1


def test_a_function_set_on_an_instance_by_a_closure_takes_the_ordinary_compile_without_a_trace(
    cache: Path, caplog: pytest.LogCaptureFixture
):
    """pickle writes such a function as its class's, without the closure, so the saved file could
    not load (RELIABILITY 1230: FLUX.1's shared LoRA forward did so on the GPU): no trace is spent."""
    torch._dynamo.reset()
    x = torch.randn(2, 4, 8)  # [B, N, D]
    model = ToyDenoiser()
    eager_loss, _ = _step(model, x)

    def own_forward(scale: float):
        def forward(self: torch.nn.Module, h: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.linear(h, self.weight, self.bias) * scale

        return forward

    for block in model.blocks:
        block.proj.forward = types.MethodType(own_forward(1.0), block.proj)
    assert precompile_key.local_instance_functions(model.blocks[0]) == [
        "Linear.forward (test_a_function_set_on_an_instance_by_a_closure_takes_the_ordinary_compile_"
        "without_a_trace.<locals>.own_forward.<locals>.forward)"
    ]
    _ordinary_without_a_trace(model, x, eager_loss, caplog, "functions set on instances that pickle cannot")
    assert precompile_key.local_instance_functions(ToyDenoiser().blocks[0]) == []
    lambda_block = ToyDenoiser().blocks[0]  # a module-level lambda: pickle cannot find it either
    lambda_block.proj.forward = types.MethodType(_SCALED, lambda_block.proj)
    assert precompile_key.local_instance_functions(lambda_block) == ["Linear.forward (<lambda>)"]
