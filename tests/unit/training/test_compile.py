"""Regional compile (TrainConfig.compile): off / auto / on per device, the repeated blocks of every
family, the same loss compiled as eager, and the never-fatal fallback when the compiler fails."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from lorastudio import families
from lorastudio.config import TrainConfig
from lorastudio.errors import ConfigError
from lorastudio.tiny.models import build
from lorastudio.training.adapters.lora import add_lora, lora_config_for
from lorastudio.training.loop import train
from lorastudio.training.noise import make_objective
from lorastudio.training.speed.compile import (
    RECOMPILE_LIMIT,
    compile_denoiser,
    compile_problems,
    compile_state,
    repeated_blocks,
    run_compiled,
    wants_compile,
)
from lorastudio.training.step import forward_backward

CPU = torch.device("cpu")


def test_modes_on_the_cpu():
    assert wants_compile("off", CPU) is False
    assert wants_compile("auto", CPU) is False  # auto = on only on CUDA
    assert compile_problems("auto", CPU) == []
    with pytest.raises(ConfigError, match="compile: 'on' needs a CUDA GPU"):
        wants_compile("on", CPU)


def test_auto_means_cuda():
    assert wants_compile("auto", torch.device("cuda")) is True
    assert wants_compile("on", torch.device("cuda")) is True
    assert wants_compile("off", torch.device("cuda")) is False


def test_on_is_refused_on_the_cpu_and_leaves_no_output(make_config, studio_home):
    cfg = make_config("flux", compile="on")
    with pytest.raises(ConfigError, match="regional torch.compile is a GPU speed feature"):
        train(cfg, lambda _event: None, device="cpu")
    assert not (studio_home / "outputs" / "run").exists()


def test_auto_on_the_cpu_trains_eagerly(make_config):
    result = train(
        make_config("flux", compile="auto"), lambda _event: None, device="cpu", return_denoiser=True
    )
    assert result.steps_run == 2
    assert compile_state(result.denoiser) is None


@pytest.mark.parametrize("key", ["sdxl", "flux", "qwen-image", "z-image"])
def test_every_family_declares_repeated_blocks(key: str):
    denoiser = _denoiser(key)
    blocks = repeated_blocks(denoiser)
    assert blocks
    assert {type(b).__name__ for b in blocks} <= set(denoiser._repeated_blocks)
    # every block of the declared classes is found, in module order
    declared = [m for m in denoiser.modules() if type(m).__name__ in denoiser._repeated_blocks]
    assert blocks == declared


def test_named_classes_select_other_blocks_without_touching_the_model():
    denoiser = _denoiser("sdxl")
    resnets = repeated_blocks(denoiser, ["ResnetBlock2D"])
    assert resnets and {type(b).__name__ for b in resnets} == {"ResnetBlock2D"}
    assert repeated_blocks(denoiser, []) == []
    assert list(denoiser._repeated_blocks) == ["BasicTransformerBlock"]  # the model's own list is unchanged
    assert {type(b).__name__ for b in repeated_blocks(denoiser)} == {"BasicTransformerBlock"}


class _Case:
    """A tiny FLUX.1 denoiser with LoRA, its objective and a fixed batch: one micro-step."""

    def __init__(self, batch: int = 2) -> None:
        self.family = families.get("flux")
        pipe = build("flux", 0)
        self.cfg = TrainConfig(family="flux", base_model="tiny", data_dir="tiny", lora_rank=4, lora_alpha=4.0)
        self.objective = make_objective(self.family, self.cfg, dict(pipe.scheduler.config))
        self.denoiser = pipe.transformer.train()
        torch.manual_seed(0)
        self.params = add_lora(self.denoiser, lora_config_for(self.cfg, self.family.spec.lora_targets))
        with torch.no_grad():  # non-zero LoRA B so that LoRA gradients flow into both factors
            for p in self.params:
                p.normal_(std=0.05)
        g = torch.Generator().manual_seed(3)
        dim = self.denoiser.config.joint_attention_dim
        self.batch = batch
        self.latents = torch.randn(batch, 16, 8, 8, generator=g)  # [B, C, h, w]
        self.cond = {
            "prompt_embeds": torch.randn(batch, 6, dim, generator=g),  # [B, L, D]
            "pooled": torch.randn(batch, self.denoiser.config.pooled_projection_dim, generator=g),  # [B, Dp]
        }
        self.info = {
            "original_size": [(64, 64)] * batch,
            "crop_top_left": [(0, 0)] * batch,
            "target_size": (64, 64),
        }

    def step(self) -> tuple[float, list[torch.Tensor]]:
        for p in self.params:
            p.grad = None
        scaler = torch.amp.GradScaler("cpu", enabled=False)
        share = forward_backward(
            self.family, self.denoiser, self.objective, self.latents, self.cond, self.info, self.cfg,
            torch.Generator().manual_seed(5), self.batch, scaler,
        )  # fmt: skip
        assert share.dim() == 0 and not share.requires_grad
        return float(share), [p.grad.clone() for p in self.params]


def _denoiser(key: str) -> Any:
    pipe = build(key, 0)
    return pipe.unet if key == "sdxl" else pipe.transformer


def test_compiled_blocks_give_the_eager_loss_and_gradients():
    case = _Case()
    eager_loss, eager_grads = case.step()
    state = compile_denoiser(case.denoiser, case.params, backend="eager")  # Dynamo graphs, no codegen
    assert state.active and len(state.blocks) == 3  # 1 double-stream + 2 single-stream blocks
    compiled_loss, compiled_grads = case.step()
    assert compiled_loss == pytest.approx(eager_loss, rel=1e-5)
    for e, c in zip(eager_grads, compiled_grads, strict=True):
        torch.testing.assert_close(c, e, rtol=1e-4, atol=1e-6)
    assert compile_state(case.denoiser).active  # still compiled: nothing fell back
    assert torch._dynamo.config.recompile_limit >= RECOMPILE_LIMIT


def test_single_blocks_share_one_graph_whatever_the_stride_of_a_size_one_batch():
    """FLUX.1's first single block gets a contiguous [1, N, D] input, the later ones a slice of a
    longer concatenation (same memory order, another batch stride): one graph for all of them
    (RESULTS note 38). The double blocks keep two: block 0's input needs no gradient."""
    torch._dynamo.reset()
    case = _Case(batch=1)
    eager_loss, _ = case.step()
    compile_denoiser(case.denoiser, case.params, backend="eager")
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    compiled_loss, _ = case.step()
    assert compiled_loss == pytest.approx(eager_loss, rel=1e-5)
    # tiny FLUX.1: 1 double block (1 graph) + 2 single blocks (1 graph, was 2 before)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - frames == 2
    case.step()  # a second step compiles nothing new
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - frames == 2


def _broken_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    raise RuntimeError("simulated code generation failure")


def test_a_compiler_failure_falls_back_to_eager_with_the_same_result(caplog):
    case = _Case()
    eager_loss, eager_grads = case.step()
    compile_denoiser(case.denoiser, case.params, backend=_broken_backend)
    with caplog.at_level("WARNING", logger="lorastudio.training.speed.compile"):
        loss, grads = case.step()
    state = compile_state(case.denoiser)
    assert not state.active
    assert "simulated code generation failure" in state.fallback_reason
    assert "falling back to eager" in caplog.text
    assert all(b._compiled_call_impl is None for b in repeated_blocks(case.denoiser))
    assert loss == pytest.approx(eager_loss, rel=1e-6)
    for e, g in zip(eager_grads, grads, strict=True):
        torch.testing.assert_close(g, e)


def test_a_failure_mid_accumulation_restores_the_earlier_gradients():
    case = _Case()
    compile_denoiser(case.denoiser, case.params, backend=_broken_backend)
    earlier = [torch.full_like(p, 0.5) for p in case.params]
    for p, g in zip(case.params, earlier, strict=True):
        p.grad = g.clone()

    def fails_after_touching_grads() -> None:
        for p in case.params:
            p.grad.add_(1.0)  # a half-done backward
        raise torch._dynamo.exc.BackendCompilerFailed(_broken_backend, RuntimeError("boom"), None)

    calls = []

    def call() -> str:
        calls.append(1)
        if len(calls) == 1:
            fails_after_touching_grads()
        return "eager result"

    assert run_compiled(case.denoiser, call) == "eager result"
    for p, g in zip(case.params, earlier, strict=True):
        torch.testing.assert_close(p.grad, g)


def test_errors_that_are_not_the_compilers_pass_through():
    case = _Case()
    compile_denoiser(case.denoiser, case.params, backend="eager")

    def call() -> None:
        raise ValueError("bad input shape")

    with pytest.raises(ValueError, match="bad input shape"):
        run_compiled(case.denoiser, call)
    assert compile_state(case.denoiser).active


def test_a_model_without_repeated_blocks_stays_eager():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    state = compile_denoiser(model, list(model.parameters()))
    assert not state.active
    assert "declares no repeated blocks" in state.fallback_reason
    assert run_compiled(model, lambda: 7) == 7


def test_the_first_step_report_names_dynamo_time_and_the_caches(caplog):
    """The worker log's line after a compiled run's first step (training/speed/first_step_report.py)
    carries Dynamo's own seconds and the graph count, read from Dynamo's counters."""
    import logging

    from lorastudio.training.speed.first_step_report import first_step_compile_summary, log_first_step_compile

    torch._dynamo.reset()
    case = _Case(batch=1)
    compile_denoiser(case.denoiser, case.params, backend="eager")
    case.step()
    summary = first_step_compile_summary()
    assert summary is not None and summary["_compile.compile_inner"] > 0
    assert summary["stats.unique_graphs"] >= 2
    with caplog.at_level(logging.INFO, logger="lorastudio.training.speed.first_step_report"):
        log_first_step_compile(1.25)
    assert "first step 1.25 s" in caplog.text and "_compile.compile_inner" in caplog.text


def test_block_zero_shares_the_graph_of_the_later_blocks(make_config, monkeypatch):
    """Qwen-Image's block 0 gets hidden states that need no gradient (frozen embedders), the later
    blocks' do: the compiled call promotes them to a leaf that does, so every block shares one
    graph (RESULTS note 38), and the run's losses are those of the eager run."""
    from lorastudio.training import loop_phases
    from lorastudio.training.speed import compile as compile_module

    eager = train(make_config("qwen-image", batch_size=1, output_name="eager"), lambda _e: None, device="cpu")
    real_compile = compile_module.compile_denoiser
    monkeypatch.setattr(loop_phases, "wants_compile", lambda mode, device: True)
    monkeypatch.setattr(
        compile_module, "compile_denoiser", lambda *a, **k: real_compile(*a, **{**k, "backend": "eager"})
    )
    torch._dynamo.reset()
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    compiled = train(
        make_config("qwen-image", batch_size=1, output_name="compiled"), lambda _e: None, device="cpu"
    )
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - before == 1  # was 2
    assert compiled.losses == pytest.approx(eager.losses, rel=1e-5)
