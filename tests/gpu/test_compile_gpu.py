"""GPU: regional compile (Inductor) of a tiny denoiser trains with the eager losses, in bf16.
Skipped without CUDA; run with `pytest -m gpu tests/gpu`."""

from __future__ import annotations

import pytest
import torch

from lorastudio import families
from lorastudio.config import TrainConfig
from lorastudio.tiny.models import build
from lorastudio.training.adapters.lora import add_lora, lora_config_for
from lorastudio.training.noise import make_objective
from lorastudio.training.optim import make_optimizer
from lorastudio.training.precision import run_numerics
from lorastudio.training.speed.compile import compile_denoiser, compile_state
from lorastudio.training.step import forward_backward

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
DEV = torch.device("cuda")


def _losses(key: str, compiled: bool, steps: int = 4) -> list[float]:
    """`steps` optimizer steps of a tiny `key` denoiser in bf16 from seed 0 (same data, same noise)."""
    family = families.get(key)
    pipe = build(key, 0)
    cfg = TrainConfig(
        family=key, base_model="tiny", data_dir="tiny", lora_rank=4, lora_alpha=4.0, learning_rate=1e-3
    )
    objective = make_objective(family, cfg, dict(pipe.scheduler.config))
    denoiser = pipe.transformer.to(DEV, torch.bfloat16).train()
    torch.manual_seed(0)
    params = add_lora(denoiser, lora_config_for(cfg, family.spec.lora_targets))
    if compiled:
        compile_denoiser(denoiser, params)
    optimizer = make_optimizer(params, cfg)
    g = torch.Generator().manual_seed(3)
    latents = torch.randn(2, 16, 16, 16, generator=g).to(DEV, torch.bfloat16)  # [B, C, h, w]
    dim = denoiser.config.joint_attention_dim
    cond = {
        "prompt_embeds": torch.randn(2, 8, dim, generator=g),  # [B, L, D]
        "pooled": torch.randn(2, denoiser.config.pooled_projection_dim, generator=g),  # [B, Dp]
    }
    info = {"original_size": [(128, 128)] * 2, "crop_top_left": [(0, 0)] * 2, "target_size": (128, 128)}
    generator = torch.Generator().manual_seed(5)
    scaler = torch.amp.GradScaler("cuda", enabled=False)
    shares = []
    with run_numerics(True, DEV):
        for _ in range(steps):
            shares.append(
                forward_backward(family, denoiser, objective, latents, cond, info, cfg, generator, 2, scaler)
            )
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    if compiled:
        state = compile_state(denoiser)
        assert state is not None and state.active, state.fallback_reason if state else "not compiled"
    return [float(s) for s in shares]  # one host sync, after the steps


def test_compiled_flux_matches_eager_bf16():
    eager = _losses("flux", compiled=False)
    compiled = _losses("flux", compiled=True)
    assert all(torch.isfinite(torch.tensor(eager)))
    for e, c in zip(eager, compiled, strict=True):
        assert c == pytest.approx(e, rel=2e-2)  # bf16, fused and reordered kernels


def test_a_cudnn_flux_graph_comes_from_aotautograds_cache_in_a_second_process(tmp_path):
    """FLUX.1's single block holds cuDNN's contiguous-gradient autograd.Function; AOTAutograd's
    cache used to bypass such a graph, so every run traced it again (~0.9 s of a warm first step at
    real size, RESULTS note 39). Two processes on one Inductor cache: the second takes both graphs
    from AOTAutograd's cache, bypasses none, and computes what the first did."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    # AOTAutograd's own cache: Dynamo's saved output (training/speed/precompile.py) would skip it
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "LORASTUDIO_PRECOMPILE": "0"}
    child = Path(__file__).with_name("cached_compile_child.py")
    runs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, str(child)], env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(runs)
    first, second = runs
    assert first["aot"].get("autograd_cache_bypass", 0) == 0
    assert second["aot"].get("autograd_cache_bypass", 0) == 0
    assert (
        second["aot"].get("autograd_cache_hit", 0) == 2 and second["aot"].get("autograd_cache_miss", 0) == 0
    )
    assert second["loss"] == first["loss"]
    assert second["grad_norm"] == pytest.approx(first["grad_norm"], rel=1e-2)


def _torch_cannot_precompile() -> str | None:
    from lorastudio.training.speed.precompile import torch_cannot_precompile

    return torch_cannot_precompile()


@pytest.mark.skipif(_torch_cannot_precompile() is not None, reason="this torch cannot save Dynamo's output")
def test_a_cudnn_flux_graph_comes_from_dynamos_saved_output_in_a_second_process(tmp_path):
    """Dynamo's saved output (training/speed/precompile.py, RESULTS note 45) with Inductor on CUDA, the
    cuDNN contiguous-gradient Function in the graph: the first process traces and saves both block
    graphs, the second loads them (Dynamo compiles no frame) and computes what the first did."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "LORASTUDIO_PRECOMPILE": "1"}
    child = Path(__file__).with_name("cached_compile_child.py")
    runs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, str(child)], env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(runs)
    first, second = runs
    assert first["precompile"]["saved"] == 2 and first["precompile"]["fallback"] == 0
    assert second["precompile"]["hit"] == 2 and second["precompile"]["saved"] == 0
    assert second["dynamo_frames"] == 0  # nothing traced by Dynamo's ordinary path
    assert second["loss"] == first["loss"]
    assert second["grad_norm"] == pytest.approx(first["grad_norm"], rel=1e-2)
