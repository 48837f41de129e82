"""attention_backend: what each device can honour, the probe shapes of each family's denoiser,
auto's choice (a failed cuDNN probe falls back to flash with its reason), the torch flags it
sets and their restore, and a CPU training run that reports its kernel in PlanChosen."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lorastudio.config import family_problems
from lorastudio.errors import ConfigError
from lorastudio.tiny.models import build
from lorastudio.training.loop import train
from lorastudio.training.precision import run_numerics
from lorastudio.training.speed import attention, attention_early
from lorastudio.training.speed.attention import (
    AttentionChoice,
    KernelProbe,
    apply_attention,
    attention_problems,
    choose_attention,
    probe_cudnn,
    probe_shapes,
)

CPU = torch.device("cpu")
CUDA = torch.device("cuda")


def test_cuda_kernels_are_refused_without_cuda():
    for backend in ("cudnn", "efficient"):
        (problem,) = attention_problems(backend, CPU)
        assert problem.field == "attention_backend" and "CUDA kernel" in problem.message
        assert attention_problems(backend, CUDA) == []
    for backend in ("auto", "flash", "math"):
        assert attention_problems(backend, CPU) == []
    assert attention_problems("flash", torch.device("mps"))


def test_cudnn_on_the_cpu_fails_the_preflight_and_leaves_no_output(make_config, studio_home):
    with pytest.raises(ConfigError, match="attention_backend: 'cudnn' is a CUDA kernel"):
        train(make_config("flux", attention_backend="cudnn"), lambda _event: None, device="cpu")
    assert not (studio_home / "outputs" / "run").exists()


def test_every_transformer_family_may_ask_for_cudnn_and_auto_probes_flux(make_config, monkeypatch):
    """FLUX.1 was blocked from cuDNN until its crash was traced to sliced output gradients
    (bench note 17); now its config is accepted and auto probes its shapes like the others."""
    for family in ("flux", "qwen-image", "z-image"):
        problems = family_problems(make_config(family, attention_backend="cudnn"))
        assert [p for p in problems if p.field == "attention_backend"] == []
    probed: list[list] = []
    monkeypatch.setattr(attention, "fa4_unavailable", lambda _dev: "not installed")
    monkeypatch.setattr(
        attention, "probe_attention", lambda _dev, _dtype, shapes, kernels: _passed(probed, shapes)
    )
    shapes = probe_shapes(build("flux", 0).transformer.config, 4096, 512, 1)
    assert choose_attention("auto", CUDA, torch.bfloat16, shapes) == AttentionChoice("cudnn")
    assert probed == [shapes]


def _passed(record: list, shapes: list) -> dict[str, KernelProbe]:
    """A cuDNN probe result that passed, recording the shapes it was asked for."""
    record.append(shapes)
    return {"cudnn": KernelProbe(True)}


def test_probe_shapes_come_from_each_transformer_config():
    flux = {"num_attention_heads": 24, "attention_head_dim": 128}
    assert probe_shapes(flux, 4096, 512, 1) == [(1, 24, 4608, 128), (1, 24, 4096, 128)]
    zimage = {"n_heads": 30, "dim": 3840}
    assert probe_shapes(zimage, 1024, 0, 2) == [(2, 30, 1024, 128)]  # one length when no text
    for family in ("flux", "qwen-image", "z-image"):
        denoiser = build(family, 0).transformer
        (batch, heads, tokens, head_dim), _ = probe_shapes(dict(denoiser.config), 16, 8, 1)
        assert heads >= 1 and head_dim >= 1 and tokens == 24 and batch == 1
    unet = build("sdxl", 0).unet
    assert probe_shapes(dict(unet.config), 16, 77, 1) == []  # a U-Net: auto does not probe


def test_auto_without_cuda_or_without_shapes_keeps_torch_default():
    assert choose_attention("auto", CPU, torch.float32, [(1, 2, 8, 16)]) == AttentionChoice("default")
    assert choose_attention("auto", CUDA, torch.bfloat16, []) == AttentionChoice("default")
    assert choose_attention("math", CPU, torch.float32, []) == AttentionChoice("math")


def test_auto_on_cuda_uses_cudnn_only_when_the_probe_passes(monkeypatch):
    shapes = [(1, 24, 4608, 128)]
    asked: list = []
    monkeypatch.setattr(attention, "fa4_unavailable", lambda _dev: "not installed")
    monkeypatch.setattr(attention, "probe_attention", lambda dev, dtype, sh, kernels: _passed(asked, sh))
    assert choose_attention("auto", CUDA, torch.bfloat16, shapes) == AttentionChoice("cudnn")
    assert asked == [shapes]
    crashed = {"cudnn": KernelProbe(False, "the probe exited with -11: Segmentation fault")}
    monkeypatch.setattr(attention, "probe_attention", lambda *_: crashed)
    choice = choose_attention("auto", CUDA, torch.bfloat16, shapes)
    assert choice.backend == "flash" and "exited with -11" in str(choice.fallback_reason)
    fp32 = choose_attention("auto", CUDA, torch.float32, shapes)
    # torch's flash kernel takes no fp32 either: it ran the efficient one under flash's name
    assert fp32.backend == "efficient" and "bf16/fp16" in str(fp32.fallback_reason)


def test_a_probe_whose_child_fails_gives_the_reason_not_an_exception():
    """The real child process: on this CPU-only machine it cannot reach a GPU and exits non-zero."""
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA (the GPU test runs the passing probe)")
    reason = probe_cudnn(CUDA, torch.bfloat16, [(1, 2, 64, 64)])
    assert reason is not None and reason.startswith("the probe exited with 1")


def test_apply_sets_the_kernels_and_run_numerics_restores_them():
    before = (torch.backends.cuda.cudnn_sdp_enabled(), torch.backends.cuda.flash_sdp_enabled())
    order = torch._C._get_sdp_priority_order()
    with run_numerics(True, CPU):
        apply_attention(AttentionChoice("math"))
        assert not torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.math_sdp_enabled()
        q = torch.randn(1, 2, 8, 16)
        assert torch.allclose(
            F.scaled_dot_product_attention(q, q, q), torch.softmax(q @ q.mT / 4, -1) @ q, atol=1e-6
        )
        apply_attention(AttentionChoice("cudnn"))
        assert torch.backends.cuda.cudnn_sdp_enabled()
        assert torch._C._get_sdp_priority_order()[0] == int(torch.nn.attention.SDPBackend.CUDNN_ATTENTION)
        apply_attention(AttentionChoice("flash"))
        assert not torch.backends.cuda.cudnn_sdp_enabled() and torch.backends.cuda.flash_sdp_enabled()
    assert (torch.backends.cuda.cudnn_sdp_enabled(), torch.backends.cuda.flash_sdp_enabled()) == before
    assert torch._C._get_sdp_priority_order() == order


def test_a_cpu_run_reports_its_kernel_and_math_trains_like_the_default(make_config):
    losses, kernels = [], []
    for backend in ("auto", "math"):
        events: list = []
        result = train(
            make_config("flux", attention_backend=backend, output_name=f"run-{backend}"),
            events.append,
            device="cpu",
        )
        (plan,) = [e for e in events if e.type == "plan_chosen"]
        kernels.append(plan.attention_backend)
        losses.append(result.losses)
    assert kernels == ["default", "math"]
    assert losses[1] == pytest.approx(losses[0], rel=1e-4)


def test_a_run_on_cudnn_hooks_every_attention_module_and_a_flash_run_none(make_config, monkeypatch):
    """The loop gives the denoiser contiguous_attention_grads exactly when the chosen kernel is
    cuDNN (the choice and the torch flags are stubbed: this CPU has no cuDNN kernel)."""
    from lorastudio.training import loop_phases as loop  # where the phases look their helpers up

    hooked: list[int] = []
    real = attention.contiguous_attention_grads

    def spy(denoiser):
        hooked.append(real(denoiser))
        return hooked[-1]

    monkeypatch.setattr(attention, "contiguous_attention_grads", spy)
    monkeypatch.setattr(loop, "apply_attention", lambda choice: None)
    for backend in ("flash", "cudnn"):
        monkeypatch.setattr(attention_early, "choose_cached", lambda *_, b=backend, **_kw: AttentionChoice(b))
        events: list = []
        train(make_config("flux", steps=1, output_name=f"hooks-{backend}"), events.append, device="cpu")
        (plan,) = [e for e in events if e.type == "plan_chosen"]
        assert plan.attention_backend == backend
        assert len(hooked) == (backend == "cudnn")
    tiny = build("flux", 0).transformer
    assert hooked == [len(tiny.transformer_blocks) + len(tiny.single_transformer_blocks)]


def test_a_crash_under_cudnn_says_how_to_retry_without_it():
    from lorastudio.training.loop import _message

    crash = RuntimeError("CUDA error: an illegal memory access was encountered")
    assert 'attention_backend = "flash"' in _message(crash, "cudnn")
    assert _message(crash, "flash") == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert "attention_backend" not in _message(RuntimeError("shape mismatch"), "cudnn")


def _watch_attention_grads(transformer: torch.nn.Module, seen: list[bool]) -> None:
    """Record, per attention module with a tensor output, whether the gradient reaching that raw
    output is contiguous (a forward hook registering a tensor hook; register it before the
    engine's hooks so that it sees what reaches the attention processor)."""

    def watch(module, args, output):
        if isinstance(output, torch.Tensor):
            output.register_hook(lambda g: seen.append(g.is_contiguous()))

    for module in transformer.modules():
        if type(module).__name__.endswith("Attention"):
            module.register_forward_hook(watch)


def _flux_forward_backward(transformer: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, input gradient) of one forward + backward of the tiny FLUX.1 transformer on
    fixed inputs."""
    g = torch.Generator().manual_seed(0)
    cfg = transformer.config
    tokens, text = 16, 8
    ids = torch.zeros(tokens, 3)
    ids[:, 1], ids[:, 2] = torch.arange(tokens) // 4, torch.arange(tokens) % 4
    hidden = torch.randn(1, tokens, cfg.in_channels, generator=g).requires_grad_(True)  # [B, L, C]
    out = transformer(
        hidden_states=hidden,
        encoder_hidden_states=torch.randn(1, text, cfg.joint_attention_dim, generator=g),
        pooled_projections=torch.randn(1, cfg.pooled_projection_dim, generator=g),
        timestep=torch.tensor([0.5]),
        img_ids=ids,
        txt_ids=torch.zeros(text, 3),
        guidance=torch.tensor([3.5]) if cfg.guidance_embeds else None,
        return_dict=False,
    )[0]  # [B, L, C]
    out.backward(torch.randn(out.shape, generator=g))
    return out.detach(), hidden.grad


def test_contiguous_attention_grads_hands_the_attention_a_contiguous_gradient_and_changes_nothing():
    """FLUX.1's single blocks concatenate [attention | MLP], so the gradient reaching their
    attention output is a non-contiguous slice (what the cuDNN backward mishandles); with the
    hooks every attention output gets a contiguous gradient and the maths is unchanged."""
    plain = build("flux", 0).transformer.float()
    hooked = build("flux", 0).transformer.float()
    seen_plain: list[bool] = []
    seen_hooked: list[bool] = []
    _watch_attention_grads(plain, seen_plain)
    _watch_attention_grads(hooked, seen_hooked)
    count = attention.contiguous_attention_grads(hooked)
    want_out, want_grad = _flux_forward_backward(plain)
    got_out, got_grad = _flux_forward_backward(hooked)
    single = len(hooked.single_transformer_blocks)
    assert count == len(hooked.transformer_blocks) + single
    assert seen_plain.count(False) == single  # without the hooks: one sliced gradient per single block
    assert len(seen_hooked) == single and all(seen_hooked)
    torch.testing.assert_close(got_out, want_out, rtol=0, atol=0)
    torch.testing.assert_close(got_grad, want_grad, rtol=0, atol=0)


def test_chroma_never_gets_cudnn_its_text_mask_crashed_it(make_config, monkeypatch):
    """Chroma's additive text mask reaches every attention call; cuDNN's SDPA hit an illegal
    memory access on it on the H200 (bench note 24). Asking for cudnn is refused naming why, and
    auto takes the efficient kernel without a probe (the probe's unmasked shapes would pass)."""
    from lorastudio.families.common import without_cudnn

    problems = family_problems(make_config("chroma", attention_backend="cudnn"))
    (problem,) = [p for p in problems if p.field == "attention_backend"]
    assert "text mask" in problem.message and "'auto'" in problem.message
    assert family_problems(make_config("chroma", attention_backend="auto")) == []
    monkeypatch.setattr(attention, "probe_attention", lambda *_a: pytest.fail("masked: no probe"))
    shapes = [(1, 24, 4608, 128)]
    choice = choose_attention("auto", CUDA, torch.bfloat16, shapes, masked=True)
    assert choice.backend == "efficient" and "text mask" in choice.fallback_reason
    # a family whose batches are masked only sometimes (mixed caption lengths) keeps cuDNN out of
    # those calls alone
    previous = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(True)
    try:
        with without_cudnn(True):
            assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.cudnn_sdp_enabled()
        with without_cudnn(False):
            assert torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(previous)


class _Started(Exception):
    """Raised by the fake process start once it has seen the child's environment."""


def test_the_probe_childs_environment_holds_no_secret(monkeypatch):
    """A run from a hub id holds the hub token as HF_TOKEN in its os.environ (give_hub_token):
    both probe children were started with it, so their /proc/PID/environ showed it (RELIABILITY
    1011). The rest of the run's environment still reaches them."""
    monkeypatch.setenv("HF_TOKEN", "hf_run_secret")
    monkeypatch.setenv("FLASH_ATTENTION_CUTE_DSL_CACHE_DIR", "/fa4-cache")
    seen: list[dict[str, str]] = []

    def start(*_args, env, **_kwargs):
        seen.append(env)
        raise _Started

    monkeypatch.setattr(attention.subprocess, "run", start)
    monkeypatch.setattr(attention_early.subprocess, "Popen", start)
    with pytest.raises(_Started):
        attention.probe_attention(CUDA, torch.bfloat16, [(1, 2, 64, 64)], ["cudnn"])
    with pytest.raises(_Started):
        attention_early.RunningProbe(CUDA, torch.bfloat16, [(1, 2, 64, 64)], ["cudnn"])
    assert len(seen) == 2
    for env in seen:
        assert "HF_TOKEN" not in env and "hf_run_secret" not in env.values()
        assert env["FLASH_ATTENTION_CUTE_DSL_CACHE_DIR"] == "/fa4-cache" and env["PYTHONUNBUFFERED"] == "1"
