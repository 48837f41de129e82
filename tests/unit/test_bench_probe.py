"""bench/probe_speed.py's per-row figures: the ratio to the same call's plain step and the MFU."""

from __future__ import annotations

import pytest
from bench.probe_speed import PEAK_BF16_TFLOPS, TFLOP_PER_SAMPLE, add_ratios

pytestmark = pytest.mark.slow  # the GPU bench harness on the CPU (bench/, not the product)


def test_rows_get_the_ratio_to_the_calls_base_row_and_bf16_mfu():
    bases: dict[str, float] = {}
    early = {"family": "flux", "variant": "ref", "samples_per_s": 2.7}
    add_ratios(early, bases)  # no base row yet in this call: no ratio
    assert "x_base" not in early and early["mfu"] == round(171.3 * 2.7 / 802, 3)
    base = {"family": "flux", "variant": "base", "samples_per_s": 1.8}
    add_ratios(base, bases)
    assert "x_base" not in base and "mfu" not in base and bases == {"flux": 1.8}
    fp8 = {"family": "flux", "variant": "fp8+cudnng", "samples_per_s": 3.24}
    add_ratios(fp8, bases)
    assert fp8["x_base"] == 1.8 and "mfu" not in fp8  # fp8 rows: no bf16 MFU
    other = {"family": "zimage", "variant": "ref+cudnng", "samples_per_s": 3.8}
    add_ratios(other, bases)
    assert "x_base" not in other  # another family's base does not count
    assert other["mfu"] == round(TFLOP_PER_SAMPLE["zimage"] * 3.8 / PEAK_BF16_TFLOPS, 3)
    failed = {"family": "qwen", "variant": "ref", "error": "timeout"}
    add_ratios(failed, bases)
    assert failed == {"family": "qwen", "variant": "ref", "error": "timeout"}


def test_kernels_are_classed_by_name_as_the_h200_profiles_name_them():
    from bench.kernel_profile import kernel_class

    names = {  # kernel names from the session-9 profiles (bench/RESULTS.md note 19)
        "nvjet_sm90_qqtst_128x128_128x6_1x1_h_bz_coopA_algo2_ovscale_TNT": "fp8_gemm",
        "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT": "gemm",
        "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128": "attention",
        "triton_red_fused__scaled_mm__to_copy_abs_add_amax_cat_clamp_div_gelu_permute_t_view_6": (
            "triton_fused"
        ),
        "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(cutlass_80_tens": "gemm",
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>": "other",
    }
    assert {name: kernel_class(name) for name in names} == names


def test_the_fused_projection_probe_keeps_flux_outputs_and_puts_the_lora_on_the_fused_linears():
    import torch
    from bench.probe_models import fused_projections
    from diffusers.models.transformers.transformer_flux import FluxAttention

    from lorastudio.tiny.models import build_flux
    from lorastudio.training.adapters.lora import add_lora, lora_config_for

    model = build_flux(0).transformer.eval()
    attns = [m for m in model.modules() if isinstance(m, FluxAttention)]
    joint = next(m for m in attns if m.added_kv_proj_dim is not None)  # a double block's
    single = next(m for m in attns if m.added_kv_proj_dim is None)
    x, ctx = torch.randn(1, 10, joint.query_dim), torch.randn(1, 6, joint.query_dim)  # [B, L, D]
    before = joint(x, encoder_hidden_states=ctx), single(x)
    fuse, targets = fused_projections("flux", None, baseline_targets=False)
    notes = fuse(model)
    after = joint(x, encoder_hidden_states=ctx), single(x)
    assert notes["fused_attention_modules"] == len(attns) and joint.to_q is None and single.fused_projections
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)
    cfg = type("Cfg", (), {"lora_rank": 4, "lora_alpha": 4.0, "lora_dropout": 0.0, "lora_targets": None})()
    params = add_lora(model, lora_config_for(cfg, targets))
    names = {n for n, _ in model.named_modules() if n.endswith("lora_A")}
    assert params and any(n.endswith("to_qkv.lora_A") for n in names)
    assert not any(".to_q." in n or ".add_q_proj." in n for n in names)


def _sdxl_added_cond(unet) -> dict:
    import torch

    pooled = unet.config.projection_class_embeddings_input_dim - 6 * unet.config.addition_time_embed_dim
    return {"text_embeds": torch.randn(1, pooled), "time_ids": torch.tensor([[16.0, 16, 0, 0, 16, 16]])}


def test_the_bench_fuses_as_a_run_does_and_its_fb_probe_uses_the_engines_groups():
    import torch
    from bench.bench_step import engine_fuses
    from bench.probe_models import fused_base

    from lorastudio.tiny.models import build_flux
    from lorastudio.training.speed.fused_projections import FusedFrozenProjections

    # bench_step's engine rows: a run's fuse_projections auto on the bench's CUDA bf16 plan
    assert {name: engine_fuses(name) for name in ("flux", "qwen", "zimage", "sdxl")} == {
        "flux": True,
        "qwen": True,
        "zimage": True,
        "sdxl": True,
    }
    model = build_flux(0).transformer
    notes = fused_base("flux", lambda _: "before")(model)
    holders = [m for m in model.modules() if isinstance(m, FusedFrozenProjections)]
    assert notes == {"fused_groups": len(holders), "before": "before"} and holders
    from lorastudio.tiny.models import build_sdxl

    unet = build_sdxl(0).unet.eval()  # SDXL's groups: self-attention q/k/v, cross-attention k/v
    sample = torch.randn(1, 4, 16, 16)  # [B, C, h, w]
    text, cond = torch.randn(1, 8, unet.config.cross_attention_dim), _sdxl_added_cond(unet)
    with torch.no_grad():
        want = unet(sample, 500, text, added_cond_kwargs=cond).sample
        notes = fused_base("sdxl", None)(unet)
        got = unet(sample, 500, text, added_cond_kwargs=cond).sample
    assert notes["fused_groups"] == 2 * sum(
        type(m).__name__ == "BasicTransformerBlock" for m in unet.modules()
    )
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_fbq_fuses_only_the_attention_projections():
    from bench.probe_models import fused_base

    from lorastudio.tiny.models import build_flux
    from lorastudio.training.speed.fused_projections import FusedFrozenProjections

    model = build_flux(0).transformer
    fused_base("flux", None, qkv_only=True)(model)
    single = model.single_transformer_blocks[0]
    assert type(single.proj_mlp).__name__ == "Linear" and type(single.attn.to_q).__name__ == "FusedSlice"
    holders = [m for m in model.modules() if isinstance(m, FusedFrozenProjections)]
    assert len(holders) == 2 * len(model.transformer_blocks) + len(model.single_transformer_blocks)
    assert all(len(h.sizes) == 3 for h in holders)  # q, k, v
