"""attention_backend = "fa4" without a GPU: its refusal (no CUDA, a GPU older than Hopper,
flash_attn.cute not importable), auto's choice between cuDNN and FA4 from the probe's results,
the probe's per-kernel report, the custom ops' autograd and traceability (fake kernels on the
meta device), the fallback to SDPA for calls FA4 cannot take, and the routing of the tiny
transformers' processors through diffusers' dispatcher. The kernel itself: tests/gpu."""

from __future__ import annotations

import subprocess

import pytest
import torch
import torch.nn.functional as F

from lorastudio.errors import ConfigError
from lorastudio.tiny.models import build
from lorastudio.tiny.qwen_image import qwen_image_transformer_inputs
from lorastudio.tiny.z_image import z_image_transformer_inputs
from lorastudio.training.loop import train
from lorastudio.training.speed import attention, attention_early, attention_fa4
from lorastudio.training.speed.attention import (
    FA4_MARGIN,
    AttentionChoice,
    KernelProbe,
    attention_problems,
    choose_attention,
    pick_kernel,
    prepare_denoiser_attention,
    probe_attention,
)
from lorastudio.training.speed.attention_fa4 import fa4_attention, fa4_forward, fa4_takes

CPU = torch.device("cpu")
CUDA = torch.device("cuda")
SHAPES = [(1, 24, 4608, 128), (1, 24, 4096, 128)]


def _fake_gpu(monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int], name: str = "GPU") -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda _dev=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda _dev=None: name)


def test_fa4_is_refused_without_cuda_and_the_run_leaves_nothing(make_config, studio_home):
    (problem,) = attention_problems("fa4", CPU)
    assert problem.field == "attention_backend" and "CUDA kernel" in problem.message
    with pytest.raises(ConfigError, match="attention_backend: 'fa4' cannot run here"):
        train(make_config("flux", attention_backend="fa4"), lambda _event: None, device="cpu")
    assert not (studio_home / "outputs" / "run").exists()


def test_fa4_is_refused_on_a_gpu_older_than_hopper(monkeypatch):
    _fake_gpu(monkeypatch, (8, 0), "NVIDIA A100")
    (problem,) = attention_problems("fa4", CUDA)
    assert "Hopper (sm90) and Blackwell" in problem.message and "NVIDIA A100 is sm80" in problem.message


def test_fa4_is_refused_where_flash_attn_cute_is_not_importable(monkeypatch):
    """The real import on this machine (the extra is not installed here) gives the reason, and
    the message says how to install it; on Hopper / Blackwell with the import working: no problem."""
    if attention_fa4._import_error() is None:
        pytest.skip("flash_attn.cute is importable here")
    for capability in ((9, 0), (10, 0), (12, 0)):
        _fake_gpu(monkeypatch, capability)
        (problem,) = attention_problems("fa4", CUDA)
        assert "flash_attn.cute (FlashAttention-4) is not importable" in problem.message
        assert "lorastudio[fa4]" in problem.message and "ModuleNotFoundError" in problem.message
    monkeypatch.setattr(attention_fa4, "_import_error", lambda: None)
    assert attention_problems("fa4", CUDA) == []


def test_auto_probes_fa4_only_where_it_can_run(monkeypatch):
    asked: list[list[str]] = []

    def probe(_dev, _dtype, _shapes, kernels):
        asked.append(kernels)
        return {k: KernelProbe(True, ms=1.0) for k in kernels}

    monkeypatch.setattr(attention, "probe_attention", probe)
    monkeypatch.setattr(attention, "fa4_unavailable", lambda _dev: "not importable")
    assert choose_attention("auto", CUDA, torch.bfloat16, SHAPES) == AttentionChoice("cudnn")
    monkeypatch.setattr(attention, "fa4_unavailable", lambda _dev: None)
    assert choose_attention("auto", CUDA, torch.bfloat16, SHAPES).backend == "cudnn"  # a tie keeps cuDNN
    assert asked == [["cudnn"], ["cudnn", "fa4"]]
    assert choose_attention("fa4", CUDA, torch.bfloat16, SHAPES) == AttentionChoice("fa4")  # as asked


def test_auto_takes_fa4_when_its_probe_passed_and_it_was_faster_than_cudnn():
    def pick(cudnn: KernelProbe, fa4: KernelProbe) -> AttentionChoice:
        return pick_kernel({"cudnn": cudnn, "fa4": fa4})

    assert pick(KernelProbe(True, ms=3.3), KernelProbe(True, ms=2.9)) == AttentionChoice("fa4")
    slower = pick(KernelProbe(True, ms=3.0), KernelProbe(True, ms=3.0 * FA4_MARGIN + 0.01))
    assert slower == AttentionChoice("cudnn")
    wrong = pick(KernelProbe(True, ms=3.0), KernelProbe(False, "fa4 dq differs from flash by 0.3"))
    assert wrong.backend == "cudnn" and "fa4: fa4 dq differs" in str(wrong.fallback_reason)
    crashed = pick(KernelProbe(False, "the probe exited with -11"), KernelProbe(True, ms=9.0))
    assert crashed.backend == "fa4" and "cudnn: the probe exited with -11" in str(crashed.fallback_reason)
    neither = pick(KernelProbe(False, "no cudnn kernel"), KernelProbe(False, "no fa4 kernel"))
    assert neither.backend == "flash" and "no cudnn kernel" in str(neither.fallback_reason)
    assert "no fa4 kernel" in str(neither.fallback_reason)


def test_the_probe_blames_the_kernel_it_crashed_on(monkeypatch):
    """Each kernel's line is printed as soon as it is done: a crash in the second (FA4) keeps the
    first's result and fails the second with the exit status and the child's last error line."""
    stdout = '{"kernel": "cudnn", "ok": true, "ms": 3.1}\n'

    def run(*_args, **_kwargs):
        return subprocess.CompletedProcess([], -11, stdout, "Fatal Python error: Segmentation fault\n")

    monkeypatch.setattr(attention.subprocess, "run", run)
    got = probe_attention(CUDA, torch.bfloat16, SHAPES, ["cudnn", "fa4"])
    assert got["cudnn"] == KernelProbe(True, None, 3.1)
    assert not got["fa4"].ok and got["fa4"].reason == (
        "the probe exited with -11: Fatal Python error: Segmentation fault"
    )


def test_the_real_probe_child_without_cuda_fails_every_kernel_it_was_asked_for():
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA (the GPU test runs the passing probe)")
    got = probe_attention(CUDA, torch.bfloat16, [(1, 2, 64, 64)], ["cudnn", "fa4"])
    assert set(got) == {"cudnn", "fa4"}
    assert all(not r.ok and str(r.reason).startswith("the probe exited with 1") for r in got.values())


def test_the_custom_ops_run_autograd_and_trace_into_one_graph_each_way():
    """On the meta device the ops run their fake kernels: the backward op gives each input a
    gradient of its shape, and torch.compile (AOTAutograd, fullgraph) keeps fa4_forward in the
    forward graph and fa4_backward in the backward graph as single nodes."""
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_module_simplified

    def loss(q, k, v):
        return fa4_forward(q * 2, k, v, 0.125)[0].float().square().sum()

    def inputs():
        return [torch.randn(2, 64, 4, 32, device="meta", dtype=torch.bfloat16, requires_grad=True)] * 3

    q, k, v = (t.detach().requires_grad_(True) for t in inputs())
    loss(q, k, v).backward()
    assert [t.grad.shape for t in (q, k, v)] == [torch.Size([2, 64, 4, 32])] * 3
    graphs: list[str] = []

    def backend(gm, example):
        def keep(graph, _example):
            graphs.append(str(graph.graph))
            return make_boxed_func(graph)

        return aot_module_simplified(gm, example, fw_compiler=keep, bw_compiler=keep)

    q, k, v = (t.detach().requires_grad_(True) for t in inputs())
    torch.compile(loss, backend=backend, fullgraph=True)(q, k, v).backward()
    forward, backward = graphs
    assert forward.count("lorastudio.fa4_forward") == 1 and "fa4_backward" not in forward
    assert backward.count("lorastudio.fa4_backward") == 1 and q.grad.shape == q.shape


def test_calls_fa4_cannot_take_run_sdpa_with_the_same_result():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 8, 3, 16, generator=g) for _ in range(3))  # [B, L, H, D]
    want = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    torch.testing.assert_close(fa4_attention(q, k, v), want.transpose(1, 2))
    mask = torch.ones(2, 1, 1, 8, dtype=torch.bool)
    mask[1, ..., 5:] = False
    masked = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask
    ).transpose(1, 2)
    torch.testing.assert_close(fa4_attention(q, k, v, attn_mask=mask), masked)
    cuda_like = torch.empty(2, 8, 3, 16, dtype=torch.bfloat16, device="meta")
    assert not fa4_takes(q, k)  # CPU fp32
    assert not fa4_takes(cuda_like, cuda_like)  # not CUDA


@pytest.mark.parametrize("family", ["flux", "qwen-image", "z-image"])
def test_routing_a_transformer_sends_every_attention_call_through_fa4_attention(family, monkeypatch):
    """Every attention processor of the tiny transformer is pointed at fa4_attention through
    diffusers' dispatcher (every call reaches it), and on the CPU its SDPA fallback gives the
    unrouted model's output exactly."""
    torch.manual_seed(0)
    plain = build(family, 0).transformer.float()
    routed = build(family, 0).transformer.float()
    calls: list[tuple] = []
    real = attention_fa4.fa4_takes
    monkeypatch.setattr(
        attention_fa4, "fa4_takes", lambda q, *a, **kw: calls.append(q.shape) or real(q, *a, **kw)
    )
    count = prepare_denoiser_attention(routed, AttentionChoice("fa4"))
    assert count == sum(
        1 for m in routed.modules() if hasattr(getattr(m, "processor", None), "_attention_backend")
    )
    assert count > 0
    inputs = _inputs(family, plain)
    torch.testing.assert_close(routed(**inputs)[0], plain(**inputs)[0], rtol=0, atol=0)
    assert len(calls) >= count  # each routed processor ran fa4_attention at least once


def _inputs(family: str, model: torch.nn.Module) -> dict:
    """One forward's keyword inputs of the tiny `family` transformer (Z-Image's two captions
    differ in length: its attention gets a mask, FA4's SDPA fallback case)."""
    if family == "qwen-image":
        return qwen_image_transformer_inputs()
    if family == "z-image":
        return z_image_transformer_inputs()
    g = torch.Generator().manual_seed(1)
    cfg = model.config
    tokens, text = 16, 8
    return {
        "hidden_states": torch.randn(2, tokens, cfg.in_channels, generator=g),  # [B, L, C]
        "encoder_hidden_states": torch.randn(2, text, cfg.joint_attention_dim, generator=g),  # [B, T, D]
        "pooled_projections": torch.randn(2, cfg.pooled_projection_dim, generator=g),
        "timestep": torch.tensor([0.3, 0.7]),
        "img_ids": torch.randint(0, 4, (tokens, 3), generator=g).float(),
        "txt_ids": torch.zeros(text, 3),
        "guidance": torch.tensor([3.5, 3.5]) if cfg.guidance_embeds else None,
        "return_dict": False,
    }


def test_a_run_on_fa4_routes_the_denoiser_and_reports_it(make_config, monkeypatch):
    """The loop routes the denoiser exactly when the chosen kernel is FA4 (the choice and the torch
    flags are stubbed: this CPU has no FA4; its calls take the SDPA fallback) and trains."""
    from lorastudio.training import loop_phases as loop  # where the phases look their helpers up

    routed: list[int] = []

    def spy(denoiser, choice):
        routed.append(prepare_denoiser_attention(denoiser, choice))
        return routed[-1]

    monkeypatch.setattr(loop, "prepare_denoiser_attention", spy)
    monkeypatch.setattr(loop, "apply_attention", lambda choice: None)
    monkeypatch.setattr(attention_early, "choose_cached", lambda *_, **_kw: AttentionChoice("fa4"))
    events: list = []
    result = train(make_config("flux", steps=2, output_name="fa4-run"), events.append, device="cpu")
    (plan,) = [e for e in events if e.type == "plan_chosen"]
    assert plan.attention_backend == "fa4" and len(result.losses) == 2
    tiny = build("flux", 0).transformer
    assert routed == [len(tiny.transformer_blocks) + len(tiny.single_transformer_blocks)]
