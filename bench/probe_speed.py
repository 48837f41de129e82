"""GPU probes of speed levers, one (family, variant) per subprocess (a crash or an OOM poisons
only its own process). Every variant runs the engine's compiled step the way the loop runs it
now: forward_backward, clip, fused AdamW, and ONE host read per step (loss and grad norm
stacked), the same as training/optimize.py.

variants:
  base       the plain diffusers + peft baseline step (bench_step's), timed in the same call
  basegc     the same with diffusers' gradient checkpointing (when the plain step does not fit)
  ref        the compiled engine step as the loop runs it (one sync per step)
  eager      the same step without compile (the reference of the issue's parity check)
  wide       the engine's compile "wide": regional compile of the family's wide_compile_blocks
             (SDXL: Transformer2DModel, ResnetBlock2D, Downsample2D, Upsample2D: the U-Net's glue)
  static     compile with dynamic=False (every input shape its own graph; default: dynamic after
             the first shape change, as the engine compiles)
  bk2        after the first step at 1024x1024, one step at a second bucket (832x1216) and one
             back: the compile cost of a new aspect bucket (second_bucket_first_step_s, ...)
  whole      torch.compile of the whole denoiser instead of its blocks
  cplx       Qwen-Image, Z-Image: diffusers' complex RoPE instead of the engine's real one
             (families/real_rope.py)
  bt         LoRA on the baseline's targets (to_q, to_k, to_v, to_out.0: `lora_targets` set so)
             instead of the family's defaults (FLUX.1 / Qwen-Image also train the text stream's
             add_q/k/v_proj and to_add_out): the same work as the plain step
  lag        the loop's host read of the loss and grad norm one step late (after the next
             forward/backward is queued; non-finite steps skipped on the device): no drain per step
  nosync     no host read at all (the upper bound of "lag")
  fq         FLUX.1: diffusers' fused q/k/v projections (`fuse_projections`: one [3N, K] linear per
             stream, the separate ones removed) and the LoRA on the fused linears (to_qkv,
             to_added_qkv; with bt only to_qkv) plus the outputs: the upper bound of fusing the
             projections (one rank-16 LoRA per fused linear is less work than three)
  fb         the frozen projections that read one input as ONE matmul per group (FLUX.1,
             Qwen-Image: q/k/v per stream; FLUX.1's single blocks: proj_mlp with q/k/v; Z-Image:
             also the SwiGLU's w1/w3; SDXL: bench/probe_models.py's candidates, self-attention
             q/k/v and cross-attention k/v), the LoRA adapters unchanged (the engine's fusion without
             the shared LoRA input: training/speed/fused_projections.py; `fq`: its FLUX.1 upper bound)
  fbl        with fb: each group's LoRA members read the input once too (their A weights in one
             matmul per group): the engine's fuse_projections "on" / "auto" on CUDA bf16
  fbq        with fb / fbl: only the attention q/k/v of each group fused (FLUX.1's single blocks
             without proj_mlp; Z-Image's SwiGLU w1/w3 left separate)
  cg         CUDA graphs (compile mode "reduce-overhead"; with ref / wide / whole)
  combo      Inductor's combo kernels (independent small kernels of a graph launched as one):
             fewer launches and less back-to-back spacing per step
  mat        Inductor max-autotune for the compiled blocks (Triton GEMM templates benchmarked
             against cuBLAS, with their prologue / epilogue fusions; with cg: "max-autotune")
  cl         channels_last memory format for the denoiser and the latents (U-Net convolutions)
  bf16lora   LoRA weights AND their optimizer in bf16 (upper bound of a bf16 LoRA branch)
  cudnn      cuDNN SDPA first, as the engine's attention_backend: cudnn sets it
  cudnnc     the same through diffusers' `_native_cudnn` attention backend (q/k/v made contiguous
             [B, H, L, D] before the kernel; transformer families)
  cudnng     cuDNN first, and the gradient reaching each attention module's output made
             contiguous (training.speed.attention.contiguous_attention_grads: FLUX.1's single blocks
             hand back a slice of [attention | MLP])
  fa4        FlashAttention-4 (training/speed/attention_fa4.py, the engine's attention_backend "fa4"):
             the denoiser's attention processors routed to its custom op, SDPA flags as "flash"
  fp8        frozen-base linears of the repeated blocks as training.speed.fp8.Fp8FrozenLinear
  fp8ao      torchao convert_to_float8_training (rowwise) on the same linears, for comparison
  fp8q, int8q, nf4q   training.planning.quantize.apply_base_precision before the LoRA (the engine's path)
  dora, loha, lokr     the run's `adapter` (peft's DoRA / LoHa / LoKr, rank 16 as the LoRA)
  a8, prodigy          the run's optimizer: adamw8bit / prodigy
  dop        differential output preservation (weight 1): the base prediction too, each step
  peftfwd    with loha / lokr: peft's own forward (its per-layer draw; before RELIABILITY 1800)
  kronfwd, hadafwd   with lokr / loha: the draw-free forward with peft's full weight (before 1950 / 1990)
  keep32     with lokr / loha: the factored delta as plain ops, autograd keeping the fp32 copy of each
             adapted layer's input and LoKr's fp32 intermediate (before 2080: compare peak_gib);
             with lora / dora (and fbl's shared LoRA input): peft's fp32 cast of each adapted
             layer's input kept for the backward, not the bf16 input (before 2170)
Variants combine with "+" (e.g. fp8+cudnn, fp8q+bf16lora): each part is applied in turn.

usage: PYTHONPATH=src:. python -m bench.probe_speed --out DIR --deadline-s S flux:ref,fp8 qwen:cudnn ...
Each case prints one JSON line (and appends it to DIR/probe.jsonl); parity = max relative loss
difference over the first PARITY steps (env PROBE_PARITY_STEPS, default 6; 50 for the issue's
parity check; the same seed, data and LoRA init) against the FIRST variant listed for that family and batch
(e.g. `zimage:eager,ref,fp8` checks compile and fp8 against eager bf16). PROBE_TIME=0 skips the
timing windows (a parity-only call). Timed rows also get `x_base` (samples/s over the same call's
`base` row of the family, when it was listed before them) and, for bf16 rows with the default
LoRA targets, `mfu` (see TFLOP_PER_SAMPLE).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from bench.harness import append_row, child_main, loop_step, run_isolated
from bench.kernel_profile import kernel_profile
from bench.probe_models import convert_fp8, fused_base, fused_projections

PARITY = int(os.environ.get("PROBE_PARITY_STEPS", "6"))  # issue #7 item 5 asks for 50


def second_bucket(step_on: Any, data: Any, family: str, batch: int) -> dict[str, float]:
    """Seconds of one step at an 832x1216 bucket (its compile), a second one, and the first step
    back at `data`'s bucket; `step_on(batch_data)` runs one optimizer step on that data."""
    import torch

    from bench.bench_step import DEV
    from bench.models import synthetic_batch

    latents, cond, info = synthetic_batch(family, batch, 1024, DEV, torch.bfloat16)
    latents = torch.randn(batch, latents.shape[1], 152, 104, device=DEV, dtype=latents.dtype)  # [B,C,h,w]
    info = {**info, "original_size": [(1216, 832)] * batch, "target_size": (1216, 832)}
    out = {}
    for key, batch_data in (
        ("second_bucket_first_step_s", (latents, cond, info)),
        ("second_bucket_step_s", (latents, cond, info)),
        ("back_to_first_bucket_s", data),
    ):
        t = time.monotonic()
        step_on(batch_data)
        torch.cuda.synchronize()
        out[key] = round(time.monotonic() - t, 2)
    return out


def baseline_case(family: str, batch: int, checkpointing: bool = False) -> dict[str, Any]:
    """The plain diffusers + peft step of bench_step (the issue's baseline), timed the same way;
    `checkpointing`: with diffusers' gradient checkpointing on (the example scripts'
    --gradient_checkpointing, for a model whose plain step does not fit)."""
    import torch

    from bench.bench_step import DEV, baseline_model, baseline_step_fn, timed
    from lorastudio.training.precision import run_numerics

    with run_numerics(True, torch.device(DEV)):
        model, params = baseline_model(family)
        if checkpointing:
            model.enable_gradient_checkpointing()
        row = {"family": family, "variant": "basegc" if checkpointing else "base", "batch": batch}
        row.update(timed(baseline_step_fn(family, model, params, batch), batch))
    return row


def one_case(family: str, variant: str, batch: int) -> dict[str, Any]:
    import torch

    from bench.bench_step import DEV, Engine, timed
    from bench.models import BASELINE_TARGETS, synthetic_batch
    from lorastudio.training.precision import run_numerics
    from lorastudio.training.speed.compile import CUDA_GRAPHS, compile_denoiser, compile_state

    row: dict[str, Any] = {"family": family, "variant": variant, "batch": batch}
    parts = set(variant.split("+"))
    if variant in ("base", "basegc"):
        return baseline_case(family, batch, checkpointing=variant == "basegc")
    known = {
        "ref", "eager", "wide", "static", "bk2", "whole", "cg", "lag", "nosync", "mat", "fq", "fb", "fbl",
        "fbq", "combo", "cl", "cplx", "bt", "bf16lora", "cudnn", "cudnnc", "cudnng", "fa4", "fp8", "fp8ao",
        "fp8q", "int8q", "nf4q", "dora", "loha", "lokr", "a8", "prodigy", "dop", "peftfwd", "kronfwd",
        "hadafwd", "keep32",
    }  # fmt: skip
    if parts - known:
        raise ValueError(f"unknown probe variant part(s) {sorted(parts - known)}; known: {sorted(known)}")
    base = parts & {"fp8q", "int8q", "nf4q"}
    swap = parts & {"fp8", "fp8ao"}
    if len(base) > 1 or len(swap) > 1:
        raise ValueError(f"variant {variant!r} combines two base conversions")
    with run_numerics(True, torch.device(DEV)):
        if parts & {"cudnn", "cudnnc", "cudnng"}:  # as the engine sets it (attention_backend: cudnn)
            from lorastudio.training.speed.attention import AttentionChoice, apply_attention

            apply_attention(AttentionChoice("cudnn"))
        if "fa4" in parts:
            if parts & {"cudnn", "cudnnc", "cudnng"}:
                raise ValueError("fa4 and cudnn* are two attention kernels: pick one")
            from lorastudio.training.speed.attention import AttentionChoice, apply_attention
            from lorastudio.training.speed.attention_fa4 import fa4_unavailable

            # before the model's build: a kit missing a part (RESULTS note 35: cutlass.cute) cost
            # two cases' builds and compiles, ~190 s each, before the import failed
            if why := fa4_unavailable(torch.device(DEV)):
                raise RuntimeError(why)

            apply_attention(AttentionChoice("fa4"))
        t0 = time.monotonic()
        before = None
        if base:  # the engine's own conversion (training.planning.quantize)
            from lorastudio.training.planning.quantize import apply_base_precision

            precision = next(iter(base))[:-1]

            def before(model: Any) -> list[str]:
                return apply_base_precision(model, precision, torch.device(DEV))

        targets = tuple(BASELINE_TARGETS) if "bt" in parts else None
        if "fq" in parts:
            before, targets = fused_projections(family, before, "bt" in parts)
        if parts & {"fb", "fbl"}:
            before = fused_base(family, before, qkv_only="fbq" in parts)
        elif "fbq" in parts:
            raise ValueError("fbq restricts fb / fbl: combine it with one of them")
        overrides: dict[str, Any] = {}
        if adapter := parts & {"dora", "loha", "lokr"}:
            overrides["adapter"] = next(iter(adapter))
        if "a8" in parts:
            overrides["optimizer"] = "adamw8bit"
        elif "prodigy" in parts:
            overrides.update(optimizer="prodigy", learning_rate=1.0)
        if "peftfwd" in parts:  # the step before fix 1800 (no saved graphs: their key has no patch)
            if not adapter & {"loha", "lokr"}:
                raise ValueError("peftfwd applies to loha / lokr")
            import lorastudio.training.adapters.lora as lora_module

            lora_module.trace_friendly_lycoris, os.environ["LORASTUDIO_PRECOMPILE"] = lambda model: 0, "0"
        for part, kind in (("kronfwd", "lokr"), ("hadafwd", "loha")):  # the delta through peft's weight
            if part in parts:  # (looked up per call; no saved graphs: their key has no patch)
                if kind not in adapter:
                    raise ValueError(f"{part} applies to {kind}")
                import lorastudio.training.adapters.lycoris_forward as lycoris_forward

                setattr(lycoris_forward, f"{kind}_linear_delta", lambda layer, name, x: None)
                os.environ["LORASTUDIO_PRECOMPILE"] = "0"
        if "keep32" in parts and adapter & {"loha", "lokr"}:  # the plain ops, before 2080 (no saved
            import lorastudio.training.adapters.lycoris_forward as lycoris_forward  # graphs either)
            from lorastudio.training.adapters.lycoris_grad import plain_loha_delta, plain_lokr_delta

            lycoris_forward.lokr_delta, lycoris_forward.loha_delta = plain_lokr_delta, plain_loha_delta
            os.environ["LORASTUDIO_PRECOMPILE"] = "0"
        elif "keep32" in parts:  # LoRA / DoRA: the fp32 cast of each input kept, before 2170
            import lorastudio.training.adapters.lora_saved as lora_saved

            lora_saved.KEEP_BF16_INPUT = False
            os.environ["LORASTUDIO_PRECOMPILE"] = "0"
        eng = Engine(family, before_lora=before, targets=targets, overrides=overrides)
        row["lora_params"] = sum(p.numel() for p in eng.params)
        if adapter & {"loha", "lokr"}:  # layers with the draw-free forward (0 with peftfwd)
            from lorastudio.training.adapters.lycoris_forward import TRACED_ATTR

            row["draw_free_layers"] = sum(getattr(type(m), TRACED_ATTR, False) for m in eng.model.modules())
        if family not in TFLOP_PER_SAMPLE and not base:  # bf16 FLOPs of one fwd+bwd, for the MFU
            row["tflop_per_sample"] = round(eng.flops_per_sample() / 1e12, 1)
        if "fbl" in parts:
            from lorastudio.training.speed.fused_projections import share_lora_inputs

            row["shared_lora_groups"] = share_lora_inputs(eng.model)
        if "cplx" in parts:  # diffusers' own complex RoPE, not the engine's real one
            from lorastudio.families.real_rope import use_complex_rope, use_complex_rope_processors

            use_complex_rope()
            row["complex_rope_processors"] = use_complex_rope_processors(eng.model)
        row["notes"] = eng.notes
        row["build_s"] = round(time.monotonic() - t0, 1)
        if "cudnnc" in parts:
            eng.model.set_attention_backend("_native_cudnn")
        if "cudnng" in parts:
            from lorastudio.training.speed.attention import contiguous_attention_grads

            row["grad_hooks"] = contiguous_attention_grads(eng.model)
        if "fa4" in parts:
            from lorastudio.training.speed.attention_fa4 import route_denoiser_to_fa4

            row["fa4_processors"] = route_denoiser_to_fa4(eng.model)
        if swap:
            row.update(convert_fp8(eng.model, next(iter(swap))))
        if "bf16lora" in parts:
            for p in eng.params:
                p.data = p.data.to(torch.bfloat16)
        data = synthetic_batch(family, batch, 1024, DEV, torch.bfloat16)
        if "cl" in parts:
            eng.model.to(memory_format=torch.channels_last)
            data = (data[0].contiguous(memory_format=torch.channels_last), *data[1:])
        mode = CUDA_GRAPHS if "cg" in parts else None
        if "combo" in parts:
            import torch._inductor.config as inductor_config

            inductor_config.combo_kernels = True
        if "mat" in parts:
            mode = "max-autotune" if mode else "max-autotune-no-cudagraphs"
        dynamic = False if "static" in parts else None
        classes = eng.family.spec.wide_compile_blocks if "wide" in parts else None
        if "whole" in parts:
            eng.model.compile(mode=mode, dynamic=dynamic)
        elif "eager" not in parts:  # the engine's path (compile "on" / "wide"; graphs: run_compiled marks)
            compile_denoiser(eng.model, eng.params, classes=classes, dynamic=dynamic, mode=mode)
        losses: list[float] = []
        steps = {}

        def step_on(batch_data: Any) -> None:
            if mode and "whole" in parts:  # cudagraph trees: a new generation per optimizer step
                torch.compiler.cudagraph_mark_step_begin()
            key = id(batch_data)
            if key not in steps:  # one optimizer per data, as loop_step builds it
                read = "lag" if "lag" in parts else "none" if "nosync" in parts else "sync"
                steps[key] = loop_step(
                    eng.family, eng.model, eng.objective, eng.cfg, eng.params, batch_data, losses,
                    host_read=read, preserve=1.0 if "dop" in parts else None,
                )  # fmt: skip
            steps[key]()

        def step() -> None:
            step_on(data)

        t1 = time.monotonic()
        step()
        torch.cuda.synchronize()
        row["first_step_s"] = round(time.monotonic() - t1, 1)
        for _ in range(PARITY - 1):
            step()
        row["losses"] = [round(x, 5) for x in losses[:PARITY]]
        # the peak over the first steps, which holds what CUDA graphs record into their private
        # pool before the timing windows (timed()'s peak_gib starts after the recording)
        row["peak_first_steps_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 1)
        if "bk2" in parts:
            row.update(second_bucket(step_on, data, family, batch))
        state = compile_state(eng.model)
        row["compile_active"] = bool(state and state.active)  # the engine's regional compile only
        row["compiled"] = next((k for k in ("whole", "wide", "eager") if k in parts), "blocks")
        row["fallback"] = state.fallback_reason if state else None
        if os.environ.get("PROBE_TIME", "1") != "0":
            row.update(timed(step, batch, warm=1))
        row["finite"] = all(x == x and abs(x) < 1e6 for x in losses)
        if os.environ.get("PROBE_PROFILE"):
            row["profile"] = kernel_profile(step)
    return row


# FLOPs per sample of the engine's step at 1024 px with the family's default LoRA targets
# (bench_step's FlopCounterMode count, bench/RESULTS.md) and the H200's measured bf16 matmul peak:
# the MFU of a probe row is computed from them (bf16 rows with the default targets only)
TFLOP_PER_SAMPLE = {"flux": 171.3, "qwen": 161.2, "zimage": 126.3, "sdxl": 14.6}
PEAK_BF16_TFLOPS = 802.0
NOT_BF16 = {"fp8", "fp8ao", "fp8q", "int8q", "nf4q", "bt"}  # parts after which MFU is not reported


def add_ratios(row: dict[str, Any], base_samples_per_s: dict[str, float]) -> None:
    """Add to a timed probe row `x_base` (its samples/s over the same call's `base` row of its
    family, when one ran before it) and `mfu` (bf16 rows with the default LoRA targets; fp8 or
    quantised rows: `mfu_bf16_equiv`, the bf16 FLOPs of the step over the bf16 peak)."""
    fam, sps = row["family"], row.get("samples_per_s")
    if not sps:
        return
    if row["variant"] in ("base", "basegc"):
        base_samples_per_s.setdefault(fam, sps)  # the first plain row that ran is the reference
    elif fam in base_samples_per_s:
        row["x_base"] = round(sps / base_samples_per_s[fam], 3)
    tflop = row.get("tflop_per_sample") or TFLOP_PER_SAMPLE.get(fam)
    if row["variant"] in ("base", "basegc") or not tflop:
        return
    if not set(row["variant"].split("+")) & NOT_BF16:
        row["mfu"] = round(tflop * sps / PEAK_BF16_TFLOPS, 3)
    else:  # an fp8 / quantised base: the same bf16 FLOPs over the bf16 peak (what a user compares)
        row["mfu_bf16_equiv"] = round(tflop * sps / PEAK_BF16_TFLOPS, 3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="+", help="family:variant[,variant...][@batch]")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--deadline-s", type=float, default=540.0)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # child: family:variant@batch
        fam, rest = args.one.split(":")
        variant, batch = rest.split("@")
        child_main(
            args.one, lambda _: one_case(fam, variant, int(batch)), {"family": fam, "variant": variant}
        )
        return
    args.out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.deadline_s
    refs: dict[tuple[str, str], list[float]] = {}  # (family, batch) -> the first variant's losses
    bases: dict[str, float] = {}  # family -> samples/s of this call's `base` row
    for spec in args.cases:
        fam, rest = spec.split(":")
        variants, _, batch = rest.partition("@")
        for variant in variants.split(","):
            label = {"family": fam, "variant": variant}
            row = run_isolated("bench.probe_speed", f"{fam}:{variant}@{batch or 1}", label, deadline, 45)
            key = (fam, batch or "1")
            if row.get("losses") and key not in refs:
                refs[key] = row["losses"]
                row["parity_reference"] = True
            elif row.get("losses") and key in refs:
                rel = [abs(a - b) / max(abs(b), 1e-8) for a, b in zip(row["losses"], refs[key], strict=False)]
                row["parity_max_rel"] = round(max(rel), 5)
            add_ratios(row, bases)
            append_row(args.out, "probe.jsonl", row)


if __name__ == "__main__":
    main()
