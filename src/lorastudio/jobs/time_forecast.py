"""The preflight's forecast of a run's wall time, per phase, each number with its basis.

Sources, best first:
  history   records of finished runs on this machine (lorastudio/timings.py, written by the
            engine under <home>/run_timings/) with the same family, base model, plan, compile,
            attention setting, LoRA rank and device: the median of up to HISTORY_RUNS newest,
            each phase scaled by its work: a step and the latent cache by the cost model of the
            model's own shapes (jobs/time_work.py: linear + attention FLOPs, a U-Net's levels,
            the VAE encoder's), the record's fixed part kept at the device's rate; texts, sample
            rounds x prompts x steps, checkpoints as counted (pixels x samples where the base's
            headers cannot be read); where none ran this size and the records ran two or more
            sizes, each sized phase is a fixed part + a part that scales with its work, fitted
            on them (jobs/time_fit.py). Checked on tiny CPU runs (tests/unit/jobs/
            test_time_forecast.py, test_time_fit.py).
  machine   runs of other bases / plans / adapters on this device: their steps scaled by the cost model's
            work of each base at each size (else denoiser bytes x pixels x samples); the fixed
            phases as measured.
  model     no run on this device: the H200 step table of bench/RESULTS.md (seconds per sample
            at 1024 px of each family's default plan) scaled by denoiser size and pixels, other
            phases from the end-to-end FLUX.1 run (RESULTS note 23); on another GPU or a CPU a
            guess (CPU: no calibration is run here, the job service does not import torch).
Times are from the process's start (the CLI's or job worker's: Python and torch imports, a few
seconds, passed in to train() and kept as the process_start phase) to train()'s end. On a CPU,
one-thread records are read on the CPU clock and the forecast made wall seconds by the host's
contention now (jobs/time_contention.py). No torch here.
"""

from __future__ import annotations

import functools
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lorastudio import families
from lorastudio.config import TrainConfig
from lorastudio.host_share import HostShare
from lorastudio.jobs.time_contention import contended, cpu_clocked, recent_factor
from lorastudio.jobs.time_fit import FIT_RUNS, refit, sizes
from lorastudio.jobs.time_match import SAME_KEYS as _SAME
from lorastudio.jobs.time_match import differ_words, older_adapter
from lorastudio.jobs.time_match import same_plan as _same_plan
from lorastudio.jobs.time_match import same_size as _same_size
from lorastudio.jobs.time_match import signature_key as _key
from lorastudio.jobs.time_match import usable_record as _usable
from lorastudio.jobs.time_model import (  # the no-history basis and the shared parts (split out)
    _E2E,
    _compile_cache_kept,
    _dop,
    _from_model,
    _plan_words,
    _rate_words,
    _ratio,
    _section,
    run_units,
)
from lorastudio.jobs.time_model import PRESERVATION_STEP as PRESERVATION_STEP
from lorastudio.jobs.time_model import PROCESS_START_S as PROCESS_START_S
from lorastudio.jobs.time_rate import device_rate, fixed_round, round_fixed, rounds_from_sampled
from lorastudio.jobs.time_work import (
    fit_measures,
    nearest,
    record_image_work,
    record_round_work,
    record_step_work,
    scaled,
)
from lorastudio.timings import (
    PHASES,
    adapter_signature,
    adapter_words,
    read_records,
    run_signature,
)

if TYPE_CHECKING:
    from lorastudio.jobs.hardware import HostInfo

HISTORY_RUNS = 3
# The work per second of a forward pass, and of the VAE's work (jobs/time_work.vae_work: its
# element traffic counted at its attention's FLOP rate), over a training step's (a forward and a
# backward, counted as the forward's work). One CPU thread, CPU time (bench/cpu_costs.py, RESULTS
# note 42): the tiny FLUX.1's step 2.1e10 forward FLOPs/s at 1024 and 2048 px; the tiny VAE's
# encode 9.6-9.9e10, its decode 8.3-8.8e10 (4.0-4.7x). Fix 880 had 2x for both.
FORWARD_RATE = 3.0
VAE_RATE = 4.0
# A pipeline's bytes over its denoiser's, and the rate they load at (the e2e FLUX.1 run, note 23):
# another base's weights load scales only by the part of it that is reading bytes.
LOAD_BYTES = 1.4
LOAD_RATE = _E2E["load_gb_per_s"] * 1e9
# A sampling step's time over a training step's at the same size (e2e FLUX.1: 5.3 s / 20 vs 0.342 s).
SAMPLE_STEP_SHARE = 0.78
# A compiled run's first step when its graphs come from the on-disk compile cache, over one that
# compiles them (e2e FLUX.1 on the H200, bench/RESULTS note 27: 6.5 vs 28.8 s, 8.0-9.4 vs 37.8 s).
WARM_COMPILE_SHARE = 0.23


def time_forecast(
    cfg: TrainConfig,
    model_dir: Path | None,
    host: HostInfo,
    plan: dict[str, Any],
    compiled: bool,
    work: dict[str, Any],
    home: Path,
    share: HostShare | None = None,
) -> dict[str, Any]:
    """The forecast section of the preflight report.

    Args: the resolved config, the local pipeline (None: a hub id), the HostInfo, the plan values
    (plan_for_estimate's, as a dict), whether regional compile runs, `work` = {"steps", "texts",
    "images", "buckets", optional "text_tokens": time_model.run_units} of this run and the studio
    home (its run_timings/ history; records that cannot be read or scaled are skipped); `share`:
    the meter of this host's share of a core (None: one of its own), which turns a CPU forecast
    from one-thread records' CPU seconds into wall seconds (jobs/time_contention.py).
    Returns {"total_s", "phases": [{"name", "seconds", "basis"}], "source": "history" | "machine"
    | "model", "confidence": "measured" | "scaled" | "guess", "runs": records used, "note"}, and
    on the CPU clock "cpu_s", "host_share", "wall_per_cpu" (time_contention.contended)."""
    records = [r for r in read_records(home) if _usable(r)]
    for r in records:  # an older record's adapter, from its run's LoRA where kept (RELIABILITY 1970)
        if (adapter := older_adapter(r, home / "outputs")) is not None:
            r["signature"]["adapter"] = adapter
    clocked = cpu_clocked(records, host.name)
    forecast = _forecast(cfg, host, plan, compiled, work, home, clocked)
    if clocked is records or forecast["source"] == "model":
        return forecast
    return contended(forecast, (share or HostShare()).share(), recent_factor(home))


def _forecast(
    cfg: TrainConfig,
    host: HostInfo,
    plan: dict[str, Any],
    compiled: bool,
    work: dict[str, Any],
    home: Path,
    records: list[dict[str, Any]],
) -> dict[str, Any]:
    """time_forecast's section from `records` (this home's usable ones, a CPU's on its clock)."""
    fam = families.get(cfg.family)
    now = run_signature(
        family=cfg.family,
        base_model=str(cfg.base_model),
        denoiser=fam.spec.denoiser,
        device_name=host.name,
        plan=plan,
        compiled=compiled,
        attention_backend=cfg.attention_backend,
        buckets=work["buckets"],
        batch_size=cfg.batch_size,
        grad_accum=cfg.grad_accum,
        lora_rank=cfg.lora_rank,
        preservation=cfg.preservation is not None,
        adapter=adapter_signature(cfg.adapter, cfg.lokr_factor, cfg.lokr_decompose_both),
    )
    units = run_units(cfg, now, work)
    here = [r for r in records if r["signature"].get("device_name") == now["device_name"]]
    rate = device_rate(here, now["device_name"], _SAME)
    alike_runs = [r for r in records if all(_key(r, k) == now[k] for k in _SAME)][:FIT_RUNS]
    # a round's fixed part as this machine's runs measured it, where the records used sampled none
    elsewhere = fixed_round(here, now["family"])
    history = functools.partial(_from_history, units=units, now=now, rate=rate, elsewhere=elsewhere)
    if alike_runs:  # an earlier run of this signature left its compiled graphs in the cache (if it is kept)
        warm = compiled and _compile_cache_kept(home)
        cache = "warm" if warm else "cold" if compiled else None
        exact = [r for r in alike_runs if _same_size(r, now)]
        step_x, image_x, fit_units = fit_measures(alike_runs, units)
        sampled = [r for r in alike_runs if r.get("sample_rounds")][:HISTORY_RUNS]
        rounds = functools.partial(rounds_from_sampled, sampled=sampled, history=history)
        used = (exact or alike_runs)[:HISTORY_RUNS]
        if exact or len(sizes(alike_runs, step_x)) < 2:  # this size measured, or one size: by its work
            return rounds(history(used, compile_cache=cache), used)
        newest = rounds(history(alike_runs[:HISTORY_RUNS], compile_cache=cache), alike_runs[:HISTORY_RUNS])
        share = lambda r: _first_step_share(r, cache)  # noqa: E731
        return refit(newest, alike_runs, fit_units, share, step_x, image_x, record_round_work, round_fixed)
    machine = [r for r in records if r["signature"].get("device_name") == now["device_name"]]
    # runs of the same plan (precision, checkpointing, block swap) and compile first: an nf4
    # or checkpointed run's time per unit of work says little of a bf16 one's
    alike = [r for r in machine if _same_plan(r, now)]
    machine = nearest(alike or machine, units)[:HISTORY_RUNS]
    if machine and now["denoiser_bytes"]:
        cold = "cold" if compiled else None  # another base or plan: its graphs are compiled afresh
        return history(machine, other_base=True, compile_cache=cold)
    return _from_model(cfg, fam.spec.denoiser_class, host, now, units)


def _first_step_share(record: dict[str, Any], expect: str | None) -> float:
    """The factor from a record's first step to this run's, by how their compiles went: a record
    that compiled afresh ("cold") forecasts a run that finds its graphs cached ("warm") at
    WARM_COMPILE_SHARE, and the other way round; the same kind, or an unknown one, as it is."""
    then = record.get("compile_cache")
    if expect is None or then not in ("warm", "cold") or then == expect:
        return 1.0
    return WARM_COMPILE_SHARE if expect == "warm" else 1 / WARM_COMPILE_SHARE


def _from_history(
    records: list[dict[str, Any]],
    units: dict[str, float],
    now: dict[str, Any],
    rate: tuple[float | None, str],
    *,
    other_base: bool = False,
    compile_cache: str | None = None,
    elsewhere: tuple[float | None, str] = (None, ""),
) -> dict[str, Any]:
    """Each phase: the median over `records` of the phase scaled by this run's work (the cost
    model's where both bases can be read, its fixed part kept at `rate`: (work per second or None,
    its source), jobs/time_work.py; else pixels x samples, and denoiser bytes for another base);
    `compile_cache`: "warm" / "cold", how this run's compile is expected to go (None: no compile);
    `elsewhere`: a round's fixed part as other runs here measured it and their words
    (time_rate.fixed_round), for where none of `records` sampled."""
    exact = not other_base and all(_same_size(r, now) for r in records)
    fixed_elsewhere, fixed_from = elsewhere
    sampled = any(r.get("sample_rounds") for r in records)  # only these forecast a round (RELIABILITY 1214)
    per: dict[str, list[float]] = {name: [] for name in PHASES}
    unmeasured: set[str] = set()
    by_flops: list[bool] = []  # whether each record's step was scaled by the cost model
    for r in records:
        sig, ph = r["signature"], r["phases"]
        size = (
            now["denoiser_bytes"] / sig["denoiser_bytes"] if other_base and sig.get("denoiser_bytes") else 1.0
        )
        dop = _dop(now["preservation"]) / _dop(_key(r, "preservation"))  # a step's own work
        then = record_step_work(r) if units["step_flops"] else None
        by_flops.append(bool(then))
        if then:  # the cost model: the record's fixed part kept, its work part scaled
            plain = scaled(r["s_per_step"], then, units["step_flops"], rate[0])
            first = max(ph["first_step"] + plain - r["s_per_step"], 0.0)
        else:  # pixels x samples (x denoiser bytes for another base), in proportion
            ratio = size * _ratio(units["step_work"], sig["pixels"] * sig["batch_size"] * sig["grad_accum"])
            plain, first = r["s_per_step"] * ratio, ph["first_step"] * ratio
        step = plain * dop
        per["steps"].append(step * max(units["steps"] - 1, 0))
        per["first_step"].append(first * dop * _first_step_share(r, compile_cache))
        # the load's bytes part (the pipeline's bytes at the e2e run's read rate, at most all of it)
        # scaled by the bases' sizes, the rest (a tiny pipeline's load is all of it: components
        # built, files opened) kept
        per["weights_load"].append(
            scaled(
                ph["weights_load"],
                LOAD_BYTES * sig["denoiser_bytes"],
                LOAD_BYTES * now["denoiser_bytes"],
                LOAD_RATE,
            )
            if size != 1.0
            else ph["weights_load"]
        )
        # the encode phases scale by the texts / images still to encode (the disk cache holds the
        # rest); a record that encoded none says nothing of their rate (one without the counts:
        # taken as it is)
        texts = r.get("texts")
        if texts != 0 or not units["texts"]:
            per["caption_encoding"].append(ph["caption_encoding"] * _ratio(units["texts"], texts or 0))
        encoded = r.get("latents_encoded", r.get("latents"))
        image = record_image_work(r) if units["image_flops"] else None
        if image and encoded:  # the VAE's encoder: a forward only, its work at VAE_RATE x a step's
            vae_rate = rate[0] * VAE_RATE if rate[0] else None
            per["latent_cache"].append(
                scaled(ph["latent_cache"], encoded * image, units["image_flops"], vae_rate)
            )
        elif encoded != 0 or not units["images"]:
            image_work = (encoded or 0) * sig["pixels"]
            per["latent_cache"].append(ph["latent_cache"] * _ratio(units["images"], image_work))
        rounds = r.get("sample_rounds", 0)
        forward = rate[0] * FORWARD_RATE if rate[0] else None  # a round's forward passes and decodes
        round_then = record_round_work(r) if units["round_flops"] else None
        # a round's fixed part as measured (SamplePreviews.fixed_s) kept, the rest scaled by its work
        own = min(round_fixed(r) or 0.0, ph["sample_rounds"] / rounds) if rounds else 0.0
        one_round: float | None
        if rounds and round_then:  # prompts x sample steps forward passes + the prompts' decodes
            one_round = own + scaled(
                ph["sample_rounds"] / rounds - own, round_then, units["round_flops"], forward
            )
        elif rounds and then and r.get("sample_work"):  # a record before its decodes were counted
            per_sample_now = units["step_flops"] / max(units["samples"], 1)
            work_then = then / (sig["batch_size"] * sig["grad_accum"]) * r["sample_work"]
            one_round = scaled(
                ph["sample_rounds"] / rounds, work_then, per_sample_now * units["sample_work"], forward
            )
        elif rounds:
            one_round = ph["sample_rounds"] / rounds * _ratio(units["sample_work"], r.get("sample_work", 0))
        elif sampled:  # a record that sampled none beside one that did: the measured round speaks
            one_round = None
        else:  # none measured: sample steps at the e2e run's share of a training step, the
            # prompts' decodes at the VAE's rate where the device's is known, and a round's fixed
            # part as another run on this machine measured it
            one_round = step * units["sample_work"] * SAMPLE_STEP_SHARE
            one_round += units["decode_flops"] / (rate[0] * VAE_RATE) if rate[0] else 0.0
            one_round += fixed_elsewhere or 0.0
            unmeasured.add("sample_rounds")
        if one_round is not None:
            per["sample_rounds"].append(one_round * units["sample_rounds"])
        checkpoints = r.get("checkpoints", 0)
        per["checkpoints"].append(  # with none written: validation rounds and snapshots, as measured
            ph["checkpoints"] / checkpoints * units["checkpoints"] if checkpoints else ph["checkpoints"]
        )
        for name in ("probe_plan", "export", "other"):
            per[name].append(ph[name])
        per["process_start"].append(ph.get("process_start", 0.0))  # older records: not measured
    n = len(records)
    runs = f"{n} earlier run{'s' if n > 1 else ''}"
    if by_flops and all(by_flops):
        how = (
            "scaled by the work of each model's shapes at each size (linear and attention FLOPs,"
            f" jobs/time_work.py), the fixed part kept at {_rate_words(rate)}"
        )
    else:
        how = "scaled by " + ("denoiser size x " if other_base else "") + "pixels x samples"
    if other_base and all(_same_plan(r, now) for r in records):
        others = differ_words(records, now)  # "other bases", "other adapters", ... (RELIABILITY 1995)
        basis = f"this machine's time per unit of work from {runs} of {others} with this plan, {how}"
        source, confidence = "machine", "scaled"
    elif other_base:  # no run of this plan here: another precision / checkpointing / compile
        basis = (
            f"a guess: this machine's time per unit of work from {runs} of"
            f" {differ_words(records, now, plans=True)}"
            f" ({_plan_words(records[0])}, this run: {_plan_words({'signature': now})}), {how};"
            " another plan's step can be several times slower or faster"
        )
        source, confidence = "machine", "guess"
    elif exact:
        basis = f"measured by {runs} of this base and plan on this machine"
        source, confidence = "history", "measured"
    else:
        basis = f"{runs} of this base and plan on this machine, {how}"
        source, confidence = "history", "scaled"
    bases = dict.fromkeys(PHASES, basis)
    bases["other"] = f"{basis} (engine preflight, freeing memory, gaps between phases)"
    if any(_key(r, "preservation") != now["preservation"] for r in records):
        for name in ("first_step", "steps"):
            bases[name] += (
                f"; differential output preservation's pass: x{PRESERVATION_STEP:.2f} a plain step"
                " (a base forward + a second forward and backward), not measured in them"
            )
    kinds = sorted({adapter_words(_key(r, "adapter")) for r in records} - {adapter_words(now["adapter"])})
    if kinds:  # another adapter's runs (RELIABILITY 1861): its layers' work differs at one rank
        for name in ("first_step", "steps"):
            bases[name] += f"; runs of {' / '.join(kinds)}, not this run's {adapter_words(now['adapter'])}"
    bases["process_start"] = f"{basis} (the CLI's or job worker's start: Python and torch imports)"
    if compile_cache is not None:
        kinds = {r.get("compile_cache") for r in records}
        told = {"warm": "from the compile cache (an earlier run of this base and plan filled it)"}
        told["cold"] = "compiled afresh (no run of this base and plan has filled the compile cache)"
        bases["first_step"] += f"; its compile {told[compile_cache]}"
        if any(_first_step_share(r, compile_cache) != 1.0 for r in records):
            other = ({"warm", "cold"} & kinds) - {compile_cache}
            bases["first_step"] += (
                f", scaled from {' / '.join(sorted(other))} compiles by"
                f" {WARM_COMPILE_SHARE if compile_cache == 'warm' else round(1 / WARM_COMPILE_SHARE, 2)}"
                " (bench/RESULTS note 27)"
            )
    if "sample_rounds" in unmeasured and units["sample_rounds"]:
        bases["sample_rounds"] = (
            f"no sample round in the {runs}: their step time x sample steps x {SAMPLE_STEP_SHARE}"
            " (a sampling step's share of a training step in the e2e FLUX.1 run, bench/RESULTS note 23)"
            + (" + each prompt's decode by the VAE at its work" if rate[0] and units["decode_flops"] else "")
            + (
                f" + a round's fixed part, {fixed_elsewhere or 0:.3g} s as {fixed_from} measured it"
                * bool(fixed_elsewhere)
            )
        )
        confidence = "scaled" if confidence == "measured" else confidence
    for name, work, rate in (
        ("caption_encoding", units["texts"], _E2E["text_s"]),
        ("latent_cache", units["images"] / 1024**2, _E2E["image_s"]),
    ):
        if not per[name]:  # every record found its texts / images on disk: the e2e run's rate
            per[name].append(work * rate * (10 if now["device_name"] == "cpu" else 1))
            bases[name] = (
                f"none encoded in the {runs}: the e2e FLUX.1 rate of bench/RESULTS note 23 (a guess here)"
            )
            confidence = "scaled" if confidence == "measured" else confidence
    phases = [{"name": k, "seconds": round(statistics.median(per[k]), 2), "basis": bases[k]} for k in PHASES]
    return _section(phases, source, confidence, n, basis)
