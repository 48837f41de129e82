"""The wall-time forecast's basis when no run of this kind is recorded on this machine (jobs/
time_forecast.py, the "model" source): bench/RESULTS' H200 table and e2e FLUX.1 phases scaled by
the denoiser's size and the run's work, a labelled guess elsewhere; and the forecast's section
shape and a run's work per phase (run_units) shared with the history basis."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from lorastudio.compile_cache import chosen_compile_cache
from lorastudio.jobs.time_work import round_work, step_work, vae_work

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.jobs.hardware import HostInfo

# A step with differential output preservation over a plain one: + the base model's no-grad forward
# (~1/3 of a forward + backward) + the adapter's second forward + backward (training/preservation.py).
PRESERVATION_STEP = 1 + 1 / 3 + 1
# A CLI or job worker process's start before train(): Python, torch, diffusers imports (5-7 s measured).
PROCESS_START_S = 6.0
# H200, each family's default plan (bf16, regional compile), 1024 px: seconds per sample and the
# bf16 denoiser bytes they were measured with (bench/RESULTS.md: FLUX.1 the e2e run, note 23;
# the others run 2's engine-compile rows, b1; SDXL b4).
_H200_S_PER_SAMPLE: dict[str, tuple[float, float]] = {
    "FluxTransformer2DModel": (0.342, 23.8e9),
    "QwenImageTransformer2DModel": (0.430, 40.9e9),
    "ZImageTransformer2DModel": (0.306, 12.3e9),
    "UNet2DConditionModel": (0.081, 5.1e9),
}
# H200, the low-memory plans of bench/RESULTS.md note 10 (eager, full checkpointing, batch 1,
# 1024 px): seconds per sample by (denoiser class, quantised precision), 3-6x the default plan's
# (18x SDXL's, whose default row is a compiled b4). What a memory budget picks on a small card.
_H200_LOW_MEMORY_S_PER_SAMPLE: dict[tuple[str, str], float] = {
    ("FluxTransformer2DModel", "nf4"): 1.374,
    ("QwenImageTransformer2DModel", "nf4"): 2.451,
    ("ZImageTransformer2DModel", "nf4"): 0.982,
    ("UNet2DConditionModel", "int8"): 1.506,
    ("UNet2DConditionModel", "nf4"): 2.243,
}
# Recomputing activations: 20-35 % of a step (training/planning/plan.py's chain order rests on it).
CHECKPOINTING_COST = {"off": 1.0, "selective": 1.2, "full": 1.35}
# The e2e FLUX.1 run's fixed phases (note 23, run 3 with cuDNN; the probe of run 1: 22 s).
_E2E = {"load_gb_per_s": 33.7 / 22.6, "text_s": 1.3 / 17, "image_s": 1.8 / 16, "probe_s": 22.0}
_E2E.update({"compile_s": 48.0, "sample_step_s": 5.3 / 20, "checkpoint_s": 0.6, "export_s": 1.0})


def _from_model(
    cfg: TrainConfig, denoiser_class: str, host: HostInfo, now: dict[str, Any], units: dict[str, float]
) -> dict[str, Any]:
    """No run on this device: the H200 table scaled by denoiser size and pixels (a guess elsewhere)."""
    ref = _H200_S_PER_SAMPLE.get(denoiser_class)
    gpu = host.device == "cuda"
    h200 = gpu and ("H200" in host.name or "H100" in host.name)
    size = now["denoiser_bytes"] or (ref[1] if ref else 0.0)
    samples = now["batch_size"] * now["grad_accum"]
    pixels = now["pixels"] / 1024**2 if now["pixels"] else 1.0
    plan = now["plan"]
    low = _H200_LOW_MEMORY_S_PER_SAMPLE.get((denoiser_class, str(plan.get("base_precision"))))
    if ref and low and plan.get("gradient_checkpointing") == "full":
        per_sample = low / ref[1] * size * pixels  # the measured low-memory plan
    else:
        per_sample = (ref[0] / ref[1] if ref else 0.342 / 23.8e9) * size * pixels
        per_sample *= CHECKPOINTING_COST.get(str(plan.get("gradient_checkpointing")), 1.0)
    if not gpu:
        per_sample *= 200  # a guess: a CPU trains ~200x slower than an H200 (not calibrated)
    if now["plan"].get("base_precision") == "fp32":
        per_sample *= 2
    per_sample *= _dop(now["preservation"])
    step = max(per_sample * samples, 0.05)
    compile_s = _E2E["compile_s"] * (size / 23.8e9) ** 0.5 if now["compiled"] else 2 * step
    probe = _E2E["probe_s"] if gpu and cfg.attention_backend == "auto" else 0.0
    load_rate = _E2E["load_gb_per_s"] * (1 if gpu else 0.5)
    if h200:
        what = "H200 table from bench/RESULTS scaled by denoiser size x pixels x samples"
    elif gpu:
        what = f"a guess: the H200 table of bench/RESULTS applied to {host.name} (not measured there)"
    else:
        what = "a guess: the H200 table of bench/RESULTS x 200 for a CPU (no run on this machine yet)"
    if plan.get("gradient_checkpointing") == "full" and low and ref:
        what += f"; {plan['base_precision']} with full checkpointing: the measured low-memory plan (note 10)"
    elif plan.get("gradient_checkpointing") in CHECKPOINTING_COST and plan["gradient_checkpointing"] != "off":
        what += f"; x{CHECKPOINTING_COST[plan['gradient_checkpointing']]:.2f} for {plan['gradient_checkpointing']} checkpointing"
    if plan.get("offload_blocks"):
        what += f"; {plan['offload_blocks']} swapped blocks' transfers not counted (not measured)"
    if now["preservation"]:
        what += f"; x{PRESERVATION_STEP:.2f} for differential output preservation's pass"
    e2e = "the FLUX.1 e2e run of bench/RESULTS note 23" + ("" if h200 else " (a guess on this device)")
    phases = [
        (
            "process_start",
            PROCESS_START_S,
            "a guess: the CLI's or job worker's start (Python and torch imports)",
        ),
        (
            "weights_load",
            1.4 * size / 1e9 / load_rate,
            f"pipeline size / {load_rate:.1f} GB/s read rate from {e2e}",
        ),
        ("caption_encoding", units["texts"] * _E2E["text_s"], f"texts x time per text from {e2e}"),
        ("latent_cache", units["images"] / 1024**2 * _E2E["image_s"], f"images x pixels from {e2e}"),
        ("probe_plan", probe, f"attention probe of {e2e}" if probe else "no attention probe"),
        (
            "first_step",
            compile_s,
            f"regional compile of {e2e}" if now["compiled"] else "2 steps (no compile)",
        ),
        ("steps", step * max(units["steps"] - 1, 0), what),
        (
            "sample_rounds",
            units["sample_rounds"] * units["sample_work"] * _E2E["sample_step_s"] * step / 0.342,
            f"sample steps x {e2e}",
        ),
        ("checkpoints", units["checkpoints"] * _E2E["checkpoint_s"], f"checkpoint writes of {e2e}"),
        ("export", _E2E["export_s"], f"{e2e}"),
        ("other", 5.0, "a guess (engine preflight, freeing memory)"),
    ]
    rows = [{"name": n, "seconds": round(s, 2), "basis": b} for n, s, b in phases]
    return _section(rows, "model", "scaled" if h200 and ref else "guess", 0, what)


def _section(
    phases: list[dict[str, Any]], source: str, confidence: str, runs: int, basis: str
) -> dict[str, Any]:
    total = round(sum(p["seconds"] for p in phases), 1)
    notes = {
        "measured": "within ~15 % when nothing else runs on the machine",
        "scaled": "scaled from measured runs: expect +-30 %",
        "guess": "a guess, no run of this kind measured on this machine: expect a factor of 2 either way; "
        "after one run here the forecast uses its measured times",
    }
    return {
        "total_s": total,
        "phases": phases,
        "source": source,
        "confidence": confidence,
        "runs": runs,
        "note": f"{notes[confidence]} (basis: {basis}; from the CLI's or job worker's start to the run's end)",
    }


def _dop(preservation: bool) -> float:
    """A step's work with differential output preservation on, in plain steps."""
    return PRESERVATION_STEP if preservation else 1.0


def run_units(cfg: TrainConfig, sig: dict[str, Any], work: dict[str, Any]) -> dict[str, float]:
    """This run's work per phase (`sig`: its run_signature; `work`: time_forecast's, its optional
    "text_tokens" the mean text tokens a caption gives the denoiser of a family that does not pad
    them): the same units a record's phases are divided by, the cost model's (jobs/time_work.py)
    beside pixels."""
    steps = int(work["steps"])
    every = cfg.sample_every
    rounds = 0
    if cfg.sample_prompts:
        rounds = steps // every + (1 if steps % every else 0) if every else 1
    samples = sig["batch_size"] * sig["grad_accum"]
    tokens = work.get("text_tokens")  # a non-padding family's captions, counted (jobs/caption_tokens.py)
    flops = step_work(cfg.family, sig["base_model"], sig["pixels"], samples, tokens)
    image = vae_work(cfg.family, sig["base_model"], sig["pixels"])
    prompts = len(cfg.sample_prompts)
    sample_work = prompts * (cfg.sample_steps or 1)
    decode = vae_work(cfg.family, sig["base_model"], sig["pixels"], "decoder") if prompts else None
    one_round = (
        round_work(cfg.family, sig["base_model"], sig["pixels"], sample_work, prompts, tokens)
        if prompts
        else None
    )
    return {
        "steps": steps,
        "samples": samples,  # of a step (batch x accumulation)
        "step_work": sig["pixels"] * samples,  # pixels x samples: the rule without the model's shapes
        "step_flops": flops or 0.0,  # the cost model's (jobs/time_work.py); 0: not readable
        "pixels": sig["pixels"],
        "texts": work["texts"],
        "images": work["images"] * sig["pixels"],
        "image_flops": work["images"] * image if image else 0.0,
        "sample_rounds": rounds,
        "sample_work": sample_work,
        "sample_images": prompts,  # decoded each round
        "round_flops": one_round or 0.0,  # a round's work (jobs/time_work.round_work); 0: not readable
        "decode_flops": prompts * decode if decode else 0.0,
        "checkpoints": (steps - 1) // cfg.save_every if cfg.save_every else 0,
    }


def _plan_words(record: dict[str, Any]) -> str:
    """A record's plan as a few words (base precision, checkpointing, compile)."""
    sig = record["signature"]
    plan = sig.get("plan") or {}
    words = [str(plan.get("base_precision", "?"))]
    if plan.get("gradient_checkpointing") not in (None, "off"):
        words.append(f"checkpointing {plan['gradient_checkpointing']}")
    if plan.get("offload_blocks"):
        words.append(f"{plan['offload_blocks']} blocks swapped")
    words.append("compiled" if sig.get("compiled") else "eager")
    return ", ".join(words)


def _rate_words(rate: tuple[float | None, str]) -> str:
    """The device rate as words for a basis."""
    if rate[0] is None:
        return f"none ({rate[1]}: all of a phase scales)"
    return f"{rate[0] / 1e9:.3g} GFLOP/s ({rate[1]})"


def _ratio(now: float, then: float) -> float:
    return now / then if then else 1.0


def _compile_cache_kept(home: Path) -> bool:
    """Whether Inductor's on-disk cache that runs of this home use holds anything
    (training/speed/compile.keep_compile_cache: the user's $TORCHINDUCTOR_CACHE_DIR, else
    <home>/cache/inductor; lorastudio/compile_cache.py)."""
    folder = chosen_compile_cache() or home / "cache" / "inductor"
    try:
        return folder.is_dir() and any(folder.iterdir())
    except OSError:
        return False
