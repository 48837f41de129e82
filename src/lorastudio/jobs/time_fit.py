"""Each phase of the wall-time forecast as a fixed part plus a part that scales with its work,
fitted on the recorded runs of one signature (jobs/time_forecast.py) that differ in size.

A phase's time in proportion to its work (pixels x samples, images x pixels) holds for a large
model on a GPU; a tiny model's phases are mostly fixed costs (the tiny SDXL's 256 px run forecast
a 1024 px run at 184 s, which took 48 s: bench/RESULTS note 36). Where two or more records of a
signature (family, base, device, plan, compile, rank, ...) ran at different sizes, each sized
phase is `fixed + rate x work`, least squares over those records (FIT_RUNS newest), bounded: a
negative rate is 0 (the phase is its mean), a negative fixed part is 0 (the rate through the
origin, the proportional rule). The work is the cost model's (jobs/time_work.py: a step's and
the VAE encoder's FLOPs from the model's shapes; a line in pixels missed the attention's
tokens^2, the tiny FLUX.1 at 2048 px -35 %) where the base's headers can be read, else pixels.
Under two sizes a phase is scaled from one record by that work (jobs/time_forecast.py). No torch.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

FIT_RUNS = 8  # the newest records of a signature the fit uses


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """(fixed, rate) of `y = fixed + rate * x`, least squares over `points` (x, y), bounded at 0
    each: a negative rate -> (mean y, 0); a negative fixed part -> (0, sum xy / sum xx). None
    under two distinct x (the fit is not determined)."""
    if len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    rate = sum((x - mx) * (y - my) for x, y in points) / sxx
    fixed = my - rate * mx
    if rate < 0:
        return my, 0.0
    if fixed < 0:
        return 0.0, sum(x * y for x, y in points) / sum(x * x for x, _ in points)
    return fixed, rate


Work = Callable[[dict[str, Any]], float]


def sizes(records: list[dict[str, Any]], step_x: Work | None = None) -> set[float]:
    """The distinct step sizes of `records`: `step_x(record)` (default pixels x batch x accumulation)."""
    return {(step_x or _step_work)(r) for r in records}


def refit(
    forecast: dict[str, Any],
    records: list[dict[str, Any]],
    units: dict[str, float],
    first_step_share: Callable[[dict[str, Any]], float],
    step_x: Work | None = None,
    image_x: Work | None = None,
    round_x: Callable[[dict[str, Any]], float | None] | None = None,
    round_fixed: Callable[[dict[str, Any]], float | None] | None = None,
) -> dict[str, Any]:
    """`forecast` (time_forecast's proportional section from the newest records) with each sized
    phase (first step, steps, caption encoding, latent cache, sample rounds) replaced by its
    fixed + scaling fit over `records` (one signature, FIT_RUNS newest) where they give two or
    more distinct work values; `units`: this run's work (time_model.run_units);
    `first_step_share(record)`: the factor from a record's first step to this run's (its compile);
    `step_x(record)` / `image_x(record)`: a record's step work and latent cache work in the measure
    of `units` "step_work" / "images" (jobs/time_work.py's FLOPs; default pixels x samples and
    encoded images x pixels); `round_x(record)`: a record's sample round's work
    (jobs/time_work.record_round_work; None: not counted), used with `units` "round_flops" where
    every sampled record has it; `round_fixed(record)`: a round's measured fixed part (its VAE,
    the pipeline's assembly, jobs/time_rate.round_fixed; None: not measured), taken out of each
    record's round before the fit and added back as their median.
    Each fitted phase says so in its basis; the total and the note follow."""
    n = len(records)
    step_x = step_x or _step_work
    image_x = image_x or _pixels_encoded
    fits: dict[str, tuple[list[tuple[float, float]], float, float, str]] = {}
    round_extra = 0.0  # a sample round's measured fixed part, beside its fitted work
    step_now = units["step_work"]
    fits["steps"] = (
        [(step_x(r), float(r["s_per_step"])) for r in records],
        step_now,
        max(units["steps"] - 1, 0),
        "s per step, the step's work"
        if step_x is not _step_work
        else "s per step, the step's pixels x samples",
    )
    if units["texts"]:
        texts = [(float(r["texts"]), r["phases"]["caption_encoding"]) for r in records if r.get("texts")]
        fits["caption_encoding"] = (texts, units["texts"], 1.0, "caption encoding, the texts encoded")
    if units["images"]:
        images = [(image_x(r), r["phases"]["latent_cache"]) for r in records if _encoded(r)]
        measure = "the VAE encoder's work" if image_x is not _pixels_encoded else "images x pixels"
        fits["latent_cache"] = (images, units["images"], 1.0, f"the latent cache, {measure} encoded")
    if units["sample_rounds"]:
        sampled = [r for r in records if r.get("sample_rounds") and r.get("sample_work")]
        by_round = round_x is not None and units.get("round_flops") and all(round_x(r) for r in sampled)
        if by_round:  # prompts x sample steps forward passes + the prompts' decodes, the cost model's
            x_round, now_round, what = round_x, units["round_flops"], "a sample round, its work"
        else:  # prompts x sample steps x one sample's step work (a forward each)
            x_round = lambda r: r["sample_work"] * step_x(r) / _samples(r)  # noqa: E731
            now_round = units["sample_work"] * step_now / max(units.get("samples", 1), 1)
            what = "a sample round, prompts x sample steps x a sample's " + (
                "work" if step_x is not _step_work else "pixels"
            )
        own = [
            min((round_fixed or _none)(r) or 0.0, r["phases"]["sample_rounds"] / r["sample_rounds"])
            for r in sampled
        ]
        rounds = [
            (x_round(r), r["phases"]["sample_rounds"] / r["sample_rounds"] - fixed)
            for r, fixed in zip(sampled, own, strict=True)
        ]
        measured = [f for r, f in zip(sampled, own, strict=True) if (round_fixed or _none)(r) is not None]
        if measured:
            round_extra = statistics.median(measured)
            what += f" (+ a round's fixed part, {round_extra:.3g} s, as measured)"
        fits["sample_rounds"] = (rounds, now_round, units["sample_rounds"], what)
    by_name = {p["name"]: p for p in forecast["phases"]}
    fitted = []
    for name, (points, x_now, times, what) in fits.items():
        line = fit_line(points)
        if line is None:
            continue
        fixed, rate = line
        phase = by_name[name]
        extra = round_extra if name == "sample_rounds" else 0.0
        phase["seconds"] = round((extra + fixed + rate * x_now) * times, 2)
        distinct = len({x for x, _ in points})
        phase["basis"] = (
            f"fitted on {len(points)} of {n} earlier runs of this base and plan on this machine at"
            f" {distinct} sizes: {what}, {fixed:.4g} s fixed + {rate:.4g} s per unit"
            + (f", x {times:g}" if times != 1 else "")
        )
        fitted.append(name)
        if name == "steps":  # the first step: a step at this size + its own warm-up (compile), as measured
            warm = statistics.median(
                max(r["phases"]["first_step"] * first_step_share(r) - float(r["s_per_step"]), 0.0)
                for r in records
            )
            by_name["first_step"]["seconds"] = round(warm + fixed + rate * x_now, 2)
            by_name["first_step"]["basis"] = (
                f"a step at this size as fitted ({what}) + the first step's own {warm:.3g} s beyond a"
                f" steady step (compile, warm-up: the median of the {n} earlier runs)"
            )
            fitted.append("first_step")
    if not fitted:
        return forecast
    forecast["total_s"] = round(sum(p["seconds"] for p in forecast["phases"]), 1)
    forecast["confidence"] = "scaled"
    forecast["note"] = (
        f"scaled from measured runs: expect +-30 % (basis: {', '.join(fitted)} fitted as a fixed part"
        f" + a part that scales with their work on {n} runs of this base and plan at"
        f" {len(sizes(records, step_x))} sizes, the rest from the newest runs;"
        " from the CLI's or job worker's start to the run's end)"
    )
    return forecast


def _none(record: dict[str, Any]) -> None:
    """No measured part (refit's `round_fixed` left out)."""
    return None


def _step_work(record: dict[str, Any]) -> float:
    return float(record["signature"]["pixels"] * _samples(record))


def _samples(record: dict[str, Any]) -> int:
    """The samples of a record's step (batch x accumulation, at least 1)."""
    sig = record["signature"]
    return max(int(sig["batch_size"] * sig["grad_accum"]), 1)


def _encoded(record: dict[str, Any]) -> float:
    """The images the record's latent phase encoded (0: none, or not counted)."""
    return float(record.get("latents_encoded", record.get("latents")) or 0)


def _pixels_encoded(record: dict[str, Any]) -> float:
    """The images the record's latent phase encoded x their pixels."""
    return _encoded(record) * record["signature"]["pixels"]
