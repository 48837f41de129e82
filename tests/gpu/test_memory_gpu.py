"""GPU: activation checkpointing and block swap (training/planning/memory.py, training/planning/block_swap.py) on CUDA. Block swap keeps the
swapped blocks' weights in pinned CPU memory between steps, lowers the peak by about their bytes,
and trains with the losses of the same run without it (with Inductor regional compile and
checkpointing too, and through train()); the selective policy cannot see inside an
Inductor-compiled block (the evidence for its fallback to full).
Skipped without CUDA; run with `pytest -m gpu tests/gpu/test_memory_gpu.py`."""

from __future__ import annotations

import gc
from collections import Counter
from typing import Any

import pytest
import torch

from lorastudio import families
from lorastudio.config import TrainConfig, parse_train_config
from lorastudio.tiny.models import build
from lorastudio.training.adapters.lora import add_lora, lora_config_for
from lorastudio.training.loop import train
from lorastudio.training.noise import make_objective
from lorastudio.training.optim import make_optimizer
from lorastudio.training.planning.block_swap import attach_block_swap, swap_candidates
from lorastudio.training.planning.memory import (
    SELECTIVE_ON_COMPILED,
    apply_checkpointing,
    compute_heavy_policy,
)
from lorastudio.training.precision import run_numerics
from lorastudio.training.speed.compile import compile_denoiser, compile_state
from lorastudio.training.step import forward_backward

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
DEV = torch.device("cuda")
BF16 = torch.bfloat16
FLUX = families.get("flux")


def _wide_flux() -> Any:
    """A FLUX.1 transformer with real-sized blocks (dim 1024: ~31 MB per single-stream block in
    bf16) but few tokens, so weights dominate the peak memory."""
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(0)
    return FluxTransformer2DModel(
        patch_size=1,
        in_channels=64,
        num_layers=1,
        num_single_layers=8,
        attention_head_dim=128,
        num_attention_heads=8,
        joint_attention_dim=64,
        pooled_projection_dim=32,
        guidance_embeds=False,
        axes_dims_rope=(16, 56, 56),
    )


class _Run:
    """LoRA steps of a FLUX.1 transformer in bf16 on CUDA with a fixed batch (same noise each run)."""

    def __init__(self, denoiser: Any, scheduler_config: dict[str, Any]) -> None:
        self.cfg = TrainConfig(
            family="flux", base_model="tiny", data_dir="tiny", lora_rank=4, lora_alpha=4.0, learning_rate=1e-3
        )
        self.objective = make_objective(FLUX, self.cfg, scheduler_config)
        self.denoiser = denoiser.to(BF16).train()
        torch.manual_seed(0)
        self.params = add_lora(self.denoiser, lora_config_for(self.cfg, FLUX.spec.lora_targets))
        g = torch.Generator().manual_seed(3)
        self.latents = torch.randn(2, 16, 16, 16, generator=g).to(DEV, BF16)  # [B, C, h, w]
        cfg = denoiser.config
        self.cond = {
            "prompt_embeds": torch.randn(2, 8, cfg.joint_attention_dim, generator=g),  # [B, L, D]
            "pooled": torch.randn(2, cfg.pooled_projection_dim, generator=g),  # [B, Dp]
        }
        self.info = {
            "original_size": [(128, 128)] * 2,
            "crop_top_left": [(0, 0)] * 2,
            "target_size": (128, 128),
        }
        self.generator = torch.Generator().manual_seed(5)
        self.optimizer = None

    def to_device(self) -> _Run:
        self.denoiser.to(DEV)
        return self

    def step(self) -> torch.Tensor:
        if self.optimizer is None:
            self.optimizer = make_optimizer(self.params, self.cfg)
        scaler = torch.amp.GradScaler("cuda", enabled=False)
        with run_numerics(True, DEV):
            share = forward_backward(
                FLUX, self.denoiser, self.objective, self.latents, self.cond, self.info, self.cfg,
                self.generator, 2, scaler,
            )  # fmt: skip
            torch.nn.utils.clip_grad_norm_(self.params, 1.0)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return share


def _tiny_run() -> _Run:
    pipe = build("flux", 0)
    return _Run(pipe.transformer, dict(pipe.scheduler.config))


def test_swapped_blocks_wait_in_pinned_cpu_memory_and_train_exactly():
    ref = _tiny_run().to_device()
    expected = [float(ref.step()) for _ in range(3)]
    run = _tiny_run().to_device()
    swap = attach_block_swap(run.denoiser, swap_candidates(run.denoiser, 99), DEV, record_moves=True)
    assert len(swap.blocks) == 3
    got = []
    for _ in range(3):
        got.append(float(run.step()))
        torch.cuda.synchronize()
        assert swap.resident() == []  # between steps: every swapped block back in CPU memory
        assert all(st.nbytes() == 0 for s in swap.slots for st in s.storages)
        assert all(h.is_pinned() for s in swap.slots for h in s.host)
    assert got[0] == expected[0]  # the first forward: the same kernels on the same (copied) weights
    assert got == pytest.approx(expected, rel=1e-3)  # attention backward kernels may use atomics
    assert all(p.device.type == "cuda" and p.requires_grad for p in run.params)  # LoRA stays
    assert swap.max_resident <= 2 and any(kind == "prefetch" for kind, _ in swap.moves)


def _peak_step_bytes(run: _Run) -> int:
    run.step()  # the optimizer state exists from here on
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats(DEV)
    run.step()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated(DEV)


def test_block_swap_lowers_the_peak_by_about_the_swapped_bytes():
    scheduler = dict(build("flux", 0).scheduler.config)
    baseline = _peak_step_bytes(_Run(_wide_flux(), scheduler).to_device())
    gc.collect()
    torch.cuda.empty_cache()
    assert torch.cuda.memory_allocated(DEV) < baseline // 4  # the baseline model is gone
    run = _Run(_wide_flux(), scheduler)  # staged on the CPU: the swapped blocks never all on the GPU
    blocks = swap_candidates(run.denoiser, 8)  # the 8 single-stream blocks
    inside = {id(m) for b in blocks for m in b.modules()}
    for module in run.denoiser.modules():
        if id(module) not in inside:  # the rest of the model goes to the GPU
            for p in module.parameters(recurse=False):
                p.data = p.data.to(DEV)
            for name, buf in module.named_buffers(recurse=False):
                setattr(module, name, buf.to(DEV))
    swap = attach_block_swap(run.denoiser, blocks, DEV)
    largest = max(s.nbytes for s in swap.slots)
    assert swap.swapped_bytes > 200 * 2**20
    peak = _peak_step_bytes(run)
    saved = baseline - peak
    expected = swap.swapped_bytes - 2 * largest  # two swapped blocks may be resident at once
    assert 0.8 * expected <= saved <= 1.1 * swap.swapped_bytes, (baseline, peak, swap.swapped_bytes)


def test_block_swap_with_inductor_compile_and_checkpointing_trains_like_without_it():
    ref = _tiny_run().to_device()
    compile_denoiser(ref.denoiser, ref.params)
    apply_checkpointing(ref.denoiser, "full")
    expected = [float(ref.step()) for _ in range(3)]
    run = _tiny_run().to_device()
    compile_denoiser(run.denoiser, run.params)
    apply_checkpointing(run.denoiser, "full")
    swap = attach_block_swap(run.denoiser, swap_candidates(run.denoiser, 2), DEV)
    torch._dynamo.utils.counters.clear()
    got = [float(run.step()) for _ in range(3)]
    state = compile_state(run.denoiser)
    assert state is not None and state.active, state and state.fallback_reason
    assert not torch._dynamo.utils.counters["graph_break"]
    for e, g in zip(expected, got, strict=True):
        assert g == pytest.approx(e, rel=1e-3)
    assert swap.resident() == [] and swap.max_resident <= 2


def test_quantised_nf4_blocks_swap_exactly_on_cuda():
    from torchao.quantization.quantize_.workflows.nf4.nf4_tensor import to_nf4

    class Block(torch.nn.Module):
        def __init__(self, w: torch.Tensor) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(to_nf4(w, 64, 32), requires_grad=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.linear(x, self.weight)  # [B, 256]

    class Net(torch.nn.Module):
        _repeated_blocks = ("Block",)

        def __init__(self) -> None:
            super().__init__()
            g = torch.Generator().manual_seed(0)
            self.blocks = torch.nn.ModuleList(
                Block(torch.randn(256, 256, generator=g).to(DEV, BF16)) for _ in range(4)
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for b in self.blocks:
                x = b(x)
            return x

    net = Net()
    x = torch.randn(8, 256, device=DEV, dtype=BF16, requires_grad=True)
    expected = torch.autograd.grad(net(x).float().square().sum(), x)[0]
    swap = attach_block_swap(net, list(net.blocks), DEV)
    got = torch.autograd.grad(net(x).float().square().sum(), x)[0]
    assert torch.equal(got, expected)
    torch.cuda.synchronize()
    assert swap.resident() == [] and swap.swapped_bytes > 0


class _MlpBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(256)
        self.up = torch.nn.Linear(256, 1024)
        self.down = torch.nn.Linear(1024, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))  # [B, 256]


def test_the_selective_policy_cannot_see_inside_an_inductor_compiled_block():
    from torch._dynamo.utils import counters
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    block = _MlpBlock().to(DEV)
    seen: Counter[str] = Counter()

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
        if not ctx.is_recompute:
            seen[op.overloadpacket.__name__] += 1
        return compute_heavy_policy(0)(ctx, op, *args, **kwargs)

    def contexts() -> Any:
        return create_selective_checkpoint_contexts(policy)

    x = torch.randn(64, 256, device=DEV, requires_grad=True)
    checkpoint(block, x, use_reentrant=False, context_fn=contexts).sum().backward()
    assert {"native_layer_norm", "gelu"} <= set(seen)  # eager: the policy sees every op
    seen.clear()
    counters.clear()
    block.compile(backend="inductor")
    out = checkpoint(block, x, use_reentrant=False, context_fn=contexts).sum()
    assert counters["stats"]["unique_graphs"] >= 1
    assert "native_layer_norm" not in seen and "gelu" not in seen  # fused kernels: invisible
    try:
        out.backward()
    except RuntimeError as err:  # keeping Inductor's extern matmul outputs (CPU: always)
        assert "selective activation checkpoint" in str(err)


def test_selective_with_compile_falls_back_to_full_and_trains_like_eager():
    ref = _tiny_run().to_device()
    expected = [float(ref.step()) for _ in range(3)]
    run = _tiny_run().to_device()
    compile_denoiser(run.denoiser, run.params)
    assert apply_checkpointing(run.denoiser, "selective") == [SELECTIVE_ON_COMPILED]
    got = [float(run.step()) for _ in range(3)]
    assert compile_state(run.denoiser).active
    for e, g in zip(expected, got, strict=True):
        assert g == pytest.approx(e, rel=2e-2)  # bf16, fused and reordered kernels


def _train(tiny_model, sample_dataset, name: str, **overrides: Any) -> tuple[Any, Any]:
    raw = {
        "family": "flux",
        "base_model": str(tiny_model("flux")),
        "data_dir": str(sample_dataset),
        "output_name": name,
        "resolution": 32,
        "steps": 4,
        "batch_size": 2,
        "learning_rate": 1e-3,
        "max_sequence_length": 32,
        "seed": 0,
        **overrides,
    }
    events: list = []
    result = train(parse_train_config(raw), events.append, device="cuda", return_denoiser=True)
    (plan,) = [e for e in events if e.type == "plan_chosen"]
    return result, plan


def test_train_with_block_swap_and_selective_checkpointing(tiny_model, sample_dataset):
    ref, _ = _train(tiny_model, sample_dataset, "ref", base_precision="bf16")
    result, plan = _train(
        tiny_model,
        sample_dataset,
        "swap",
        base_precision="bf16",
        offload_blocks=2,
        gradient_checkpointing="selective",
    )
    assert plan.offload_blocks == 2 and plan.compile
    assert SELECTIVE_ON_COMPILED in plan.fallbacks
    for e, g in zip(ref.losses, result.losses, strict=True):
        assert g == pytest.approx(e, rel=2e-2)
