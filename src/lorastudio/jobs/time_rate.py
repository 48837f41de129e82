"""The rate a device does the wall-time forecast's work at (jobs/time_work.py counts the work),
and what runs on this machine measured that no count can: a CPU's rate from the matmul probe each
CPU run keeps (training/planning/cpu_rate.py, RELIABILITY 1210), a sample round's fixed part (the VAE, the
pipeline's assembly, the PNGs: RELIABILITY 1212). No torch."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

from lorastudio.jobs.time_fit import fit_line
from lorastudio.jobs.time_work import record_step_work

# Forward FLOPs per second a CPU training step achieves on the tiny models' work above (the
# backward included: work counts the forward): the tiny FLUX.1's step, one thread on the 2-core
# host, 12 GFLOP/s from 64 to 512 px, 19 to 1024; the tiny SDXL's 15-17 (RELIABILITY 880). Only
# a record's split into fixed and work parts depends on it.
CPU_WORK_RATE = 1.2e10
# That step rate over the rate of training/planning/cpu_rate.py's probe (a 384 x 384 fp32 matmul at the
# run's threads, on the process's CPU clock, the fastest of its bursts): 86-94 GFLOP/s one thread
# on the 2-core host where the tiny models' step ran at CPU_WORK_RATE (RESULTS note 46; 35-37 on
# the wall clock at a load of 9). A CPU record carries its run's probe (`cpu_rate`), so another
# CPU's rate is its own probe x this share, not the 2-core host's constant.
CPU_WORK_SHARE = 0.13
RATE_RECORDS = 8  # the newest records whose probes give this host's rate (their median)


def device_rate(
    records: list[dict[str, Any]], device: str, same: tuple[str, ...]
) -> tuple[float | None, str]:
    """Step work per second of this device and where it comes from: the median over the signatures
    (`same`: the keys that make one) among `records` (this device's) that ran two or more sizes of
    the slope of their s/step against their step work (jobs/time_fit.fit_line); else
    CPU_WORK_RATE on a CPU; else (None, ...): unknown, a record's time is all work."""
    groups: dict[str, list[tuple[float, float]]] = {}
    for r in records:
        work = record_step_work(r)
        if work:
            key = repr([r["signature"].get(k) for k in same])
            groups.setdefault(key, []).append((work, float(r["s_per_step"])))
    slopes = [line[1] for points in groups.values() if (line := fit_line(points)) and line[1] > 0]
    if slopes:
        n = len(slopes)
        return 1 / statistics.median(slopes), f"fitted on {n} signature{'s' if n > 1 else ''} of this machine"
    if device == "cpu":
        probes = [p for r in records if (p := probe_rate(r))][:RATE_RECORDS]
        if probes:
            n = len(probes)
            return CPU_WORK_SHARE * statistics.median(probes), (
                f"{CPU_WORK_SHARE} x this host's matmul rate, probed by {n} run{'s' if n > 1 else ''}"
            )
        return CPU_WORK_RATE, "the tiny models' CPU rate on the 2-core host (no run here probed this one's)"
    return None, "no rate measured on this device"


def round_fixed(record: dict[str, Any]) -> float | None:
    """A record's sample round's fixed part (`sample_fixed_s`: its seconds beyond rendering its
    prompts, training/samples.SamplePreviews.fixed_s); None: not measured (no round, an older
    record)."""
    value = record.get("sample_fixed_s")
    return float(value) if isinstance(value, int | float) and math.isfinite(value) and value >= 0 else None


def fixed_round(records: list[dict[str, Any]], family: str) -> tuple[float | None, str]:
    """(the median measured round fixed part of the newest RATE_RECORDS of `records` that have one,
    those of `family` first, else any; the words naming them) or (None, "")."""
    for words, pick in (
        (f"earlier {family} runs here", lambda r: r["signature"].get("family") == family),
        ("earlier runs of other families here", lambda r: True),
    ):
        values = [v for r in records if pick(r) and (v := round_fixed(r)) is not None][:RATE_RECORDS]
        if values:
            return statistics.median(values), words
    return None, ""


def probe_rate(record: dict[str, Any]) -> float | None:
    """The matmul rate (FLOP/s) a CPU record's run probed at its threads (`cpu_rate`:
    training/planning/cpu_rate.py); None: not probed (a GPU run, a record before the probe)."""
    probe = record.get("cpu_rate")
    value = probe.get("matmul_flops") if isinstance(probe, dict) else None
    return float(value) if isinstance(value, int | float) and math.isfinite(value) and value > 0 else None


def rounds_from_sampled(
    forecast: dict[str, Any],
    used: list[dict[str, Any]],
    sampled: list[dict[str, Any]],
    history: Callable[[list[dict[str, Any]]], dict[str, Any]],
) -> dict[str, Any]:
    """`forecast` (made from the records `used`) with its sample rounds taken from `history(sampled)`
    (the same forecast made from the newest runs of this signature that sampled) where none of
    `used` sampled (a run of this very size that did not, beside one of another size that did:
    its guess from the step time is not what the measured round says; RELIABILITY 1214)."""
    if not sampled or any(r.get("sample_rounds") for r in used):
        return forecast
    rounds = next(p for p in forecast["phases"] if p["name"] == "sample_rounds")
    measured = next(p for p in history(sampled)["phases"] if p["name"] == "sample_rounds")
    if not rounds["seconds"]:
        return forecast
    rounds["seconds"] = measured["seconds"]
    rounds["basis"] = f"{measured['basis']} (the newest runs of this base and plan that sampled)"
    forecast["total_s"] = round(sum(p["seconds"] for p in forecast["phases"]), 1)
    return forecast
