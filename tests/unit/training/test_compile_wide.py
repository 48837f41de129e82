"""compile "wide" (SDXL): the U-Net's Transformer2DModels, ResNet blocks and samplers compiled as
regions, the same loss and gradients as eager, its checkpointing, and its refusals (families
without wide regions, no CUDA, block swap)."""

from __future__ import annotations

import os

import pytest
import torch
from memory_cases import Case, CountingBackend, assert_same
from torch._inductor.runtime.cache_dir_utils import cache_dir

from lorastudio import families
from lorastudio.config import TrainConfig, family_problems
from lorastudio.errors import ConfigError
from lorastudio.training.planning.memory import SELECTIVE_ON_COMPILED, apply_checkpointing, checkpointing_mode
from lorastudio.training.planning.plan import Plan, block_swap_searchable, plan_event
from lorastudio.training.speed.compile import (
    CUDA_GRAPHS,
    INSIDE_ATTR,
    STATIC_RECOMPILE_LIMIT,
    CompileRequest,
    compile_denoiser,
    compile_problems,
    compile_request,
    compile_state,
    keep_compile_cache,
    repeated_blocks,
    revert_to_eager,
    runs_compiled,
    wants_compile,
)

CPU = torch.device("cpu")
WIDE = families.get("sdxl").spec.wide_compile_blocks


def _cfg(family: str, **extra: object) -> TrainConfig:
    return TrainConfig(family=family, base_model="tiny", data_dir="tiny", **extra)


@pytest.mark.parametrize("family", ["flux", "qwen-image", "z-image"])
def test_wide_is_refused_for_the_transformer_families(family: str):
    problems = {p.field: p.message for p in family_problems(_cfg(family, compile="wide"))}
    assert "repeated blocks already hold all its compute: use 'on' or 'auto'" in problems["compile"]
    assert family_problems(_cfg("sdxl", compile="wide")) == []


def test_wide_needs_cuda_and_refuses_block_swap():
    with pytest.raises(ConfigError, match="compile: 'wide' needs a CUDA GPU"):
        wants_compile("wide", CPU)
    assert compile_problems("wide", torch.device("cuda")) == []
    assert wants_compile("wide", torch.device("cuda")) is True
    fields = {p.field: p.message for p in family_problems(_cfg("sdxl", compile="wide", offload_blocks=2))}
    assert "block swap cannot run with compile 'wide'" in fields["offload_blocks"]
    assert family_problems(_cfg("sdxl", compile="wide", offload_blocks=0)) == []
    # a budgeted run never tries block swap inside the wide regions
    assert block_swap_searchable(_cfg("sdxl", compile="on"), "cuda") is True
    assert block_swap_searchable(_cfg("sdxl", compile="wide"), "cuda") is False
    assert block_swap_searchable(_cfg("sdxl", compile="on"), "cpu") is False


@pytest.mark.slow  # compiles on the CPU
def test_wide_compiles_the_outermost_regions_with_the_eager_loss_and_gradients():
    reference = Case("sdxl").step()
    case = Case("sdxl")
    backend = CountingBackend()
    state = compile_denoiser(case.denoiser, case.params, backend=backend, classes=WIDE)
    kinds = {type(b).__name__ for b in state.blocks}
    assert {"Transformer2DModel", "ResnetBlock2D"} <= kinds <= set(WIDE)
    # the attention blocks sit inside the compiled Transformer2DModels: marked, not compiled again
    attention_blocks = repeated_blocks(case.denoiser)
    assert attention_blocks and all(runs_compiled(b) and getattr(b, INSIDE_ATTR) for b in attention_blocks)
    assert all(getattr(b, "_compiled_call_impl", None) is None for b in attention_blocks)
    assert_same(case.step(), reference, exact=False)
    assert backend.graphs > 0 and backend.runs > 0
    static = compile_denoiser(Case("sdxl").denoiser, [], backend=backend, classes=WIDE, dynamic=False)
    assert static.active and torch._dynamo.config.recompile_limit >= STATIC_RECOMPILE_LIMIT  # many buckets
    revert_to_eager(case.denoiser, "test")
    assert not any(runs_compiled(m) for m in case.denoiser.modules())


@pytest.mark.parametrize("backend", ["dynamo", pytest.param("aot_eager", marks=pytest.mark.slow)])
@pytest.mark.slow  # compiles on the CPU
def test_wide_with_selective_checkpointing_checkpoints_in_full_inside_the_regions(backend: str, caplog):
    """Full checkpointing of the attention blocks runs INSIDE the compiled Transformer2DModels
    (diffusers checkpoints them in its forward): Dynamo must trace it (it could not with an
    explicit context_fn: the run fell back to eager on the H200), and AOTAutograd too (slow)."""
    reference = Case("sdxl").step()
    case = Case("sdxl")
    compiler = CountingBackend() if backend == "dynamo" else backend
    compile_denoiser(case.denoiser, case.params, backend=compiler, classes=WIDE)
    with caplog.at_level("WARNING", logger="lorastudio.training.planning.memory"):
        assert apply_checkpointing(case.denoiser, "selective") == [SELECTIVE_ON_COMPILED]
    assert checkpointing_mode(case.denoiser) == "full"
    loss, grads = case.step()
    state = compile_state(case.denoiser)
    assert state.active, state.fallback_reason  # compiled, not an eager fallback with the same loss
    assert loss == pytest.approx(reference[0], rel=1e-5)
    for got, want in zip(grads, reference[1], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_the_compile_request_of_each_mode():
    cuda = torch.device("cuda")
    assert compile_request("on", WIDE, "off", cuda) == CompileRequest()
    assert compile_request("auto", WIDE, "full", cuda) == CompileRequest()
    assert compile_request("wide", WIDE, "off", cuda) == CompileRequest(WIDE, False, CUDA_GRAPHS)
    with_checkpointing = compile_request("wide", WIDE, "selective", cuda)
    assert (with_checkpointing.classes, with_checkpointing.dynamic, with_checkpointing.mode) == (
        WIDE,
        False,
        None,
    )
    assert "CUDA graphs off: selective activation checkpointing" in with_checkpointing.note
    assert compile_request("wide", WIDE, "off", CPU) == CompileRequest(WIDE, False)
    accumulating = compile_request("wide", WIDE, "off", cuda, accumulates=True)
    assert accumulating.mode is None and "gradient accumulation" in accumulating.note
    parallel = compile_request("wide", WIDE, "off", cuda, distributed=True)
    assert parallel.mode is None and "data-parallel" in parallel.note


class _ModeBackend(CountingBackend):
    """A counting backend that also records the torch.compile options it is given (mode)."""

    def __init__(self) -> None:
        super().__init__()
        self.options: list[dict] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list, **options: object):
        self.options.append(options)
        return super().__call__(gm, example_inputs)


@pytest.mark.slow  # compiles on the CPU
def test_cuda_graphs_start_a_new_generation_per_forward_backward(monkeypatch):
    marks = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    reference = Case("sdxl").step()
    case = Case("sdxl")
    backend = _ModeBackend()  # runs the graphs eagerly: the mode reaches it, no graphs are recorded
    state = compile_denoiser(case.denoiser, case.params, backend=backend, classes=WIDE, mode=CUDA_GRAPHS)
    assert state.cuda_graphs
    assert_same(case.step(), reference, exact=False)
    case.step()
    assert state.active and len(marks) == 2
    assert backend.graphs > 0 and all(o.get("mode") == CUDA_GRAPHS for o in backend.options)
    revert_to_eager(case.denoiser, "test")
    assert not state.cuda_graphs
    case.step()
    assert len(marks) == 2  # eager again: no graphs, no marks


def test_the_plan_event_names_what_is_compiled():
    plan = Plan("bf16", "off", 0, 4)
    wide = plan_event(
        plan,
        compiled=True,
        compile_regions="wide + CUDA graphs",
        memory_budget_gb=None,
        decided_by="settings",
    )
    assert wide.compile and wide.compile_regions == "wide + CUDA graphs"
    eager = plan_event(
        plan, compiled=False, compile_regions="wide", memory_budget_gb=None, decided_by="settings"
    )
    assert not eager.compile and eager.compile_regions == ""  # nothing compiled: nothing named


def test_inductors_own_default_in_the_environment_is_not_taken_for_the_users_choice(monkeypatch, tmp_path):
    """Inductor's import writes its default folder into TORCHINDUCTOR_CACHE_DIR (a process that
    imported diffusers has it): the studio's cache is still used (RELIABILITY 1010)."""
    import torch._inductor.compile_fx  # noqa: F401  (what a worker's imports do)
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from lorastudio.compile_cache import inductor_default_cache

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    cache_dir()  # Inductor's own call, as at its import: it puts its default in the environment
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == os.path.abspath(default_cache_dir())
    home_cache = tmp_path / "home" / "cache" / "inductor"
    assert keep_compile_cache(home_cache) == home_cache
    assert cache_dir() == str(home_cache)
    assert inductor_default_cache() == os.path.abspath(default_cache_dir())  # the torch-free restatement


def test_a_later_run_of_the_process_with_another_home_compiles_into_its_own(monkeypatch, tmp_path):
    """The folder an earlier run of this process set is not the user's choice (RELIABILITY 1012):
    the second train() of one process (the Python API) used the first home's cache."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    first, second = tmp_path / "one" / "inductor", tmp_path / "two" / "inductor"
    assert keep_compile_cache(first) == first
    monkeypatch.setenv("TRITON_CACHE_DIR", str(first / "triton" / "0"))  # Inductor's, at its first kernel
    assert keep_compile_cache(second) == second and cache_dir() == str(second)
    assert "TRITON_CACHE_DIR" not in os.environ  # Inductor derives it under `second` again
    mine = tmp_path / "mine"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(mine))  # the user's, still kept
    assert keep_compile_cache(first) == mine
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(mine))  # the user's Triton folder, kept too
    assert keep_compile_cache(second) == second and os.environ["TRITON_CACHE_DIR"] == str(mine)


def test_the_compile_cache_lives_in_the_studio_home_unless_the_user_chose_one(monkeypatch, tmp_path):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    home_cache = tmp_path / "home" / "cache" / "inductor"
    assert keep_compile_cache(home_cache) == home_cache and home_cache.is_dir()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(home_cache)
    assert cache_dir() == str(home_cache)  # what Inductor itself will use
    mine = tmp_path / "mine"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(mine))
    assert keep_compile_cache(tmp_path / "other") == mine and not (tmp_path / "other").exists()
