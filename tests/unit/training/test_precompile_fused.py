"""Dynamo's saved block graphs (training/speed/precompile.py) of a FLUX.1 whose projections are fused
and whose LoRA members share their input (the default GPU plan): saved, then loaded by the next
compile with the eager loss. Slow: two traces of the tiny FLUX.1's blocks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lorastudio.training.speed import precompile
from lorastudio.training.speed.compile import compile_denoiser

pytestmark = pytest.mark.skipif(
    precompile.torch_cannot_precompile() is not None, reason="this torch has no aot_compile"
)
BACKEND = "aot_eager" if "aot_eager" in precompile.saved_backends() else "inductor"


@pytest.mark.slow
def test_a_fused_flux_with_shared_lora_inputs_is_saved_and_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """FLUX.1's default GPU plan fuses its projections and shares the LoRA inputs: its blocks'
    saved graphs load in the next compile and give the eager loss (RELIABILITY 1230)."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv(precompile.ENV, "1")  # off by default
    for name in precompile.COUNTERS:
        monkeypatch.setitem(precompile.COUNTERS, name, 0)
    from lorastudio import families
    from lorastudio.tiny.models import build_flux
    from lorastudio.training.adapters.lora import add_lora, lora_config_for
    from lorastudio.training.speed.fused_projections import fuse_projections, share_lora_inputs

    def built() -> tuple[torch.nn.Module, list[torch.nn.Parameter]]:
        model = build_flux(0).transformer
        fuse_projections(model, families.get("flux").spec.fused_projection_groups)
        cfg = type(
            "Cfg", (), {"lora_rank": 4, "lora_alpha": 4.0, "lora_dropout": 0.0, "lora_targets": None}
        )()
        params = add_lora(model, lora_config_for(cfg, ("to_q", "to_k", "to_v", "add_q_proj")))
        with torch.no_grad():
            for i, p in enumerate(params):  # B starts at zero: make every adapter count
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(i)) * 0.1)
        share_lora_inputs(model)
        return model, params

    g = torch.Generator().manual_seed(1)
    inputs = {
        "hidden_states": torch.randn(1, 16, 64, generator=g),  # [B, L, C] packed latents
        "encoder_hidden_states": torch.randn(1, 8, 32, generator=g),  # [B, T, D]
        "pooled_projections": torch.randn(1, 32, generator=g),
        "timestep": torch.tensor([0.3]),
        "img_ids": torch.randint(0, 4, (16, 3), generator=g).float(),
        "txt_ids": torch.zeros(8, 3),
        "guidance": torch.tensor([3.5]),
        "return_dict": False,
    }

    def loss_of(model: torch.nn.Module) -> float:
        return float(model(**inputs)[0].square().mean().detach())

    torch._dynamo.reset()
    eager = loss_of(built()[0])
    for _ in range(2):  # the first compile traces and saves, the second loads
        model, params = built()
        compile_denoiser(model, params, backend=BACKEND)
        assert loss_of(model) == pytest.approx(eager, rel=1e-5)
    assert precompile.COUNTERS["saved"] == 2 and precompile.COUNTERS["hit"] == 2
    assert precompile.COUNTERS["fallback"] == 0
