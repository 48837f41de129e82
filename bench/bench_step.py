"""GPU benchmark: lorastudio's training step vs the plain diffusers + peft step, same run.

For each family it builds the full-size denoiser with random weights and times, with warm-up,
CUDA-event timing and the median of several timed windows:
  baseline   the plain step of the diffusers example scripts (bf16 base, fp32 LoRA r16 on
             to_q/to_k/to_v/to_out.0, fused AdamW; forward, MSE, backward, step);
  engine     lorastudio's own step (training.step.forward_backward = objective noise +
             family.predict + weighted MSE + backward, then clip + fused AdamW from
             training.optim, with the loop's host reads of the loss and grad norm), the
             family's default LoRA targets, eager and with regional compile (training.speed.compile).
It also counts FLOPs once per model (FlopCounterMode, one fwd+bwd at batch 1), reports MFU
against a bf16 matmul peak measured in the same run, and checks loss parity: the same N steps
from the same LoRA init and seed, compiled vs eager.

usage: PYTHONPATH=src:. python -m bench.bench_step [--out DIR] [--deadline-s S] FAMILY...
       FAMILY: flux, qwen, zimage, sdxl. Prints one JSON line a case, a table at the end.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from bench import models_2026
from bench.harness import engine_config
from bench.models import BASELINE_TARGETS, FAMILY_KEYS, baseline_inputs, build_denoiser, synthetic_batch

DEV = "cuda"
DT = torch.bfloat16
RES = 1024
PARITY_STEPS = 6
PARITY_RTOL = 2e-2  # bf16: compiled kernels fuse and reorder; per-step loss within 2 %
SCHEDULERS: dict[str, dict[str, Any]] = {
    "flux": {"shift": 3.0, "use_dynamic_shifting": True},
    "qwen": {
        "use_dynamic_shifting": True,
        "base_image_seq_len": 256,
        "max_image_seq_len": 8192,
        "base_shift": 0.5,
        "max_shift": 0.9,
        "time_shift_type": "exponential",
    },
    "zimage": {"shift": 3.0},
    "sdxl": {
        "num_train_timesteps": 1000,
        "beta_start": 0.00085,
        "beta_end": 0.012,
        "beta_schedule": "scaled_linear",
        "prediction_type": "epsilon",
    },
    **models_2026.SCHEDULERS,
}


def timed(fn: Any, batch: int, warm: int = 3, windows: int = 3, steps: int = 4) -> dict[str, Any]:
    """Run fn() `warm` times, then `windows` windows of `steps` calls each timed with CUDA
    events; median seconds per step, samples/s and the peak allocated GiB since warm-up."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(warm):
        fn()
    per_step = []
    for _ in range(windows):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            fn()
        end.record()
        torch.cuda.synchronize()
        per_step.append(start.elapsed_time(end) / 1000 / steps)
    sec = statistics.median(per_step)
    return {
        "s_per_step": round(sec, 4),
        "spread": round((max(per_step) - min(per_step)) / sec, 3),
        "samples_per_s": round(batch / sec, 3),
        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1),
    }


def peak_bf16_tflops() -> float:
    a = torch.randn(8192, 8192, device=DEV, dtype=DT)
    b = torch.randn(8192, 8192, device=DEV, dtype=DT)
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        a @ b
    end.record()
    torch.cuda.synchronize()
    return 2 * 8192**3 * 20 / (start.elapsed_time(end) / 1000) / 1e12


# --- the plain baseline -----------------------------------------------------------------------
def baseline_model(name: str) -> tuple[Any, list[torch.nn.Parameter]]:
    from peft import LoraConfig

    model = build_denoiser(name, DEV, DT)
    model.add_adapter(
        LoraConfig(r=16, lora_alpha=16, init_lora_weights="gaussian", target_modules=BASELINE_TARGETS)
    )
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.data = p.data.float()  # the example scripts keep the trainable LoRA in fp32
    return model, params


def baseline_step_fn(name: str, model: Any, params: list[torch.nn.Parameter], batch: int) -> Any:
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
    kw, target = baseline_inputs(name, batch, RES, DEV, DT)

    def step() -> None:
        out = model(**kw)[0]
        if name == "zimage":
            out = torch.stack(list(out))
        loss = torch.nn.functional.mse_loss(out.float(), target.float())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


# --- lorastudio's step ---------------------------------------------------------------------------
class Engine:
    """The engine's objects for one family: config, family hooks, objective, denoiser + LoRA."""

    def __init__(
        self,
        name: str,
        before_lora: Any = None,
        targets: tuple[str, ...] | None = None,
        fuse: bool = False,
        overrides: dict[str, Any] | None = None,
    ):
        """before_lora: an optional callable(model) applied to the built denoiser before the LoRA
        is added (e.g. training.planning.quantize.apply_base_precision); targets: the LoRA target module
        suffixes (a run's `lora_targets`; None: the family's defaults); fuse: the family's
        same-input projections fused and their LoRA inputs shared, as build_denoiser does for
        fuse_projections on (training/speed/fused_projections.py); overrides: settings of the run's
        config changed from engine_config's (e.g. adapter="dora", optimizer="adamw8bit")."""
        from lorastudio import families
        from lorastudio.training.adapters.lora import add_lora, lora_config_for
        from lorastudio.training.noise import make_objective
        from lorastudio.training.speed.fused_projections import fuse_projections, share_lora_inputs

        self.name = name
        self.family = families.get(FAMILY_KEYS[name])
        self.cfg = engine_config(name, **(overrides or {}))
        self.objective = make_objective(self.family, self.cfg, SCHEDULERS[name])
        self.model = build_denoiser(name, DEV, DT)
        self.family.adapt_denoiser(self.model)  # as the family's load_denoiser does
        self.notes = before_lora(self.model) if before_lora is not None else None
        groups = self.family.spec.fused_projection_groups
        self.fused_groups = fuse_projections(self.model, groups) if fuse else 0
        torch.manual_seed(0)
        targets = targets or self.family.spec.lora_targets
        self.params = add_lora(self.model, lora_config_for(self.cfg, targets))
        if fuse:
            share_lora_inputs(self.model)
        self.lora_init = [p.detach().clone() for p in self.params]

    def reset_lora(self) -> None:
        with torch.no_grad():
            for p, p0 in zip(self.params, self.lora_init, strict=True):
                p.copy_(p0)
                p.grad = None

    def step_fn(self, batch: int, seed: int = 0, losses: list[float] | None = None, sync: bool = True) -> Any:
        """One optimizer step as the loop does it (grad_accum 1): forward_backward, host read of
        the loss, clip + host read of the norm, fused AdamW, zero_grad."""
        from lorastudio.training.optim import make_optimizer
        from lorastudio.training.step import forward_backward

        opt = make_optimizer(self.params, self.cfg)
        scaler = torch.amp.GradScaler("cuda", enabled=False)
        latents, cond, info = synthetic_batch(self.name, batch, RES, DEV, DT)
        generator = torch.Generator().manual_seed(seed)

        def step() -> None:
            share = forward_backward(
                self.family,
                self.model,
                self.objective,
                latents,
                cond,
                info,
                self.cfg,
                generator,
                batch,
                scaler,
            )
            norm = torch.nn.utils.clip_grad_norm_(self.params, 1.0)
            if sync:  # the loop's host reads: loss per micro-step, grad norm per step
                loss = float(share)
                float(norm)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if losses is not None:
                losses.append(loss)

        return step

    def flops_per_sample(self) -> float:
        from lorastudio.training.step import forward_backward

        latents, cond, info = synthetic_batch(self.name, 1, RES, DEV, DT)
        scaler = torch.amp.GradScaler("cuda", enabled=False)
        with FlopCounterMode(display=False) as counter:
            forward_backward(
                self.family, self.model, self.objective, latents, cond, info, self.cfg,
                torch.Generator().manual_seed(0), 1, scaler,
            )  # fmt: skip
        self.reset_lora()
        return float(counter.get_total_flops())


def engine_fuses(name: str) -> bool:
    """Whether a run of family `name` fuses its projections here: fuse_projections "auto" for the
    bench's plan (bf16 base, no checkpointing, no block swap, the engine config's LoRA dropout)."""
    from lorastudio import families
    from lorastudio.config_rules import fusion_choice

    choice = fusion_choice(
        "auto",
        bool(families.get(FAMILY_KEYS[name]).spec.fused_projection_groups),
        precision="bf16",
        device_type=DEV,
        lora_dropout=engine_config(name).lora_dropout,
        plain_plan=True,
        adapter=engine_config(name).adapter,
    )
    return choice.fuse


def baseline_flops(name: str, model: Any) -> float:
    kw, target = baseline_inputs(name, 1, RES, DEV, DT)
    with FlopCounterMode(display=False) as counter:
        out = model(**kw)[0]
        if name == "zimage":
            out = torch.stack(list(out))
        torch.nn.functional.mse_loss(out.float(), target.float()).backward()
    model.zero_grad(set_to_none=True)
    return float(counter.get_total_flops())


def free() -> None:
    gc.collect()
    torch.cuda.empty_cache()


class Runner:
    def __init__(self, out: Path, deadline: float, peak: float):
        self.out, self.deadline, self.peak = out, deadline, peak
        self.rows: list[dict[str, Any]] = []

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def record(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        line = json.dumps(row)
        print(line, flush=True)
        with (self.out / "bench.jsonl").open("a") as f:
            f.write(line + "\n")

    def case(self, family: str, label: str, batch: int, fn_factory: Any, flops: float | None) -> None:
        if self.left() < 20:
            self.record({"family": family, "case": label, "batch": batch, "skipped": "deadline"})
            return
        try:
            result = timed(fn_factory(batch), batch)
            if flops:
                result["mfu"] = round(flops * result["samples_per_s"] / (self.peak * 1e12), 3)
        except torch.OutOfMemoryError:
            result = {"oom": True}
        free()
        self.record({"family": family, "case": label, "batch": batch, **result})

    def family(self, name: str, batches: list[int], base_batches: list[int]) -> None:
        t0 = time.monotonic()
        model, params = baseline_model(name)
        bflops = baseline_flops(name, model)
        self.record({"family": name, "case": "build", "params_b": round(sum(p.numel() for p in model.parameters()) / 1e9, 2),
                     "baseline_tflop_per_sample": round(bflops / 1e12, 1), "build_s": round(time.monotonic() - t0, 1)})  # fmt: skip
        for b in base_batches:
            self.case(name, "baseline", b, lambda b: baseline_step_fn(name, model, params, b), bflops)
        model = params = None
        free()
        eng = Engine(name, fuse=engine_fuses(name))  # the run's fuse_projections "auto"
        flops = eng.flops_per_sample()
        self.record({"family": name, "case": "engine-flops", "tflop_per_sample": round(flops / 1e12, 1),
                     "lora_params_m": round(sum(p.numel() for p in eng.params) / 1e6, 1),
                     "fused_projection_groups": eng.fused_groups})  # fmt: skip
        eager_losses: list[float] = []
        run_parity = eng.step_fn(1, seed=7, losses=eager_losses)
        for _ in range(PARITY_STEPS):
            run_parity()
        eng.reset_lora()
        for b in batches[:1]:  # eager at the first batch size only (device time)
            self.case(name, "engine-eager", b, lambda b: eng.step_fn(b), flops)
            eng.reset_lora()
        from lorastudio.training.speed.compile import compile_denoiser, compile_state

        compile_denoiser(eng.model, eng.params)
        compiled_losses: list[float] = []
        run_parity = eng.step_fn(1, seed=7, losses=compiled_losses)
        t1 = time.monotonic()
        try:
            run_parity()
            torch.cuda.synchronize()
            compile_s = time.monotonic() - t1
            for _ in range(PARITY_STEPS - 1):
                run_parity()
        except torch.OutOfMemoryError:
            compile_s = float("nan")
        state = compile_state(eng.model)
        rel = [abs(c - e) / max(abs(e), 1e-8) for c, e in zip(compiled_losses, eager_losses, strict=False)]
        self.record({"family": name, "case": "parity", "steps": len(rel), "eager": [round(x, 5) for x in eager_losses],
                     "compiled": [round(x, 5) for x in compiled_losses], "max_rel": round(max(rel), 5) if rel else None,
                     "ok": bool(rel) and max(rel) <= PARITY_RTOL, "rtol": PARITY_RTOL, "first_compiled_step_s": round(compile_s, 1),
                     "compile_active": bool(state and state.active), "fallback": state.fallback_reason if state else None})  # fmt: skip
        eng.reset_lora()
        for b in batches:
            self.case(name, "engine-compile", b, lambda b: eng.step_fn(b), flops)
            eng.reset_lora()
        self.case(name, "engine-compile-nosync", batches[0], lambda b: eng.step_fn(b, sync=False), flops)
        eng = None
        free()

    def table(self) -> str:
        base = {
            (r["family"]): r
            for r in self.rows
            if r.get("case") == "baseline" and r.get("batch") == 1 and "samples_per_s" in r
        }
        lines = [
            "| family | case | batch | s/step | samples/s | x baseline b1 | peak GiB | MFU |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in self.rows:
            if "samples_per_s" not in r and not r.get("oom"):
                continue
            b = base.get(r["family"])
            ratio = f"{r['samples_per_s'] / b['samples_per_s']:.2f}" if b and "samples_per_s" in r else "-"
            lines.append(f"| {r['family']} | {r['case']} | {r['batch']} | {r.get('s_per_step', 'OOM')} | "
                         f"{r.get('samples_per_s', '-')} | {ratio} | {r.get('peak_gib', '-')} | {r.get('mfu', '-')} |")  # fmt: skip
        return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("families", nargs="+", choices=sorted(FAMILY_KEYS))
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--deadline-s", type=float, default=540.0)
    parser.add_argument("--batches", default="1,2", help="engine batch sizes (sdxl: x4)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.deadline_s
    from lorastudio.training.precision import run_numerics

    with run_numerics(True, torch.device(DEV)):
        peak = peak_bf16_tflops()
        runner = Runner(args.out, deadline, peak)
        runner.record({"case": "env", "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "peak_bf16_tflops": round(peak, 1), "date": time.strftime("%Y-%m-%d")})  # fmt: skip
        for name in args.families:
            batches = [int(b) * (4 if name == "sdxl" else 1) for b in args.batches.split(",")]
            base_batches = [1] + ([4] if name == "sdxl" else [])
            try:
                runner.family(name, batches, base_batches)
            except Exception as err:  # noqa: BLE001 -- a benchmark: record the failure and go on to the next family
                runner.record(
                    {"family": name, "case": "error", "error": f"{type(err).__name__}: {str(err)[:400]}"}
                )
                free()
    table = runner.table()
    (args.out / "table.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
