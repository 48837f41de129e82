"""The wall-time forecast of a CPU run on a shared host: the run's CPU seconds, forecast from the
records' CPU-clock phases, x the wall seconds a CPU second is expected to take now, in place of the
records' wall-clock phases, which carry the load of whenever they ran (RESULTS notes 46 and 48).
That factor is the geometric mean of 1 / the share of a core a busy thread gets in the check
(lorastudio/host_share.py) and the newest run's own wall / CPU seconds where it ended within
RECENT_S (the host's load over a whole run lately): in two rounds of 17 tiny runs at loads of
7-13 each alone predicted a run's factor within 15 % for 6-7, the two together for 9 and 6 of 16
(median errors 10 and 18 %; the load factor (load + 1) / cores: 3 and 1 of 17, medians 93 and
103 %; note 48). No torch.

Only records of one thread are read so: with one thread a run's CPU seconds are its work whatever
else runs, and its wall seconds that work over its share of one core. A record of several threads
sums its threads' CPU seconds, which no one-thread share turns into wall time; such records keep
their wall-clock phases (Known problems)."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from lorastudio import json_read
from lorastudio.jobs.time_rate import probe_rate
from lorastudio.timings import HISTORY_DIR, record_order

RECENT_S = 1800.0  # the newest record's factor counts where it was written this recently


def cpu_clocked(records: list[dict[str, Any]], device: str) -> list[dict[str, Any]]:
    """`records` with each one-thread CPU record of `device` ("cpu") read on the CPU clock: its
    `cpu` part's phases, total and s/step in place of its wall-clock ones (timings.PhaseClock
    .cpu_stamped, RELIABILITY 1213). Where any record of the device has such a part, the device's
    records without one (older, or several threads) are left out, so one forecast reads one
    clock; where none has, `records` as they are. Other devices' records are kept as they are."""
    if device != "cpu":
        return records
    out = []  # in their order (newest first)
    for r in records:
        if r["signature"].get("device_name") != device:
            out.append(r)
        elif _one_thread_cpu(r):
            out.append(_on_cpu_clock(r))
    return out if any(r.get("clock") == "cpu" for r in out) else records


def _one_thread_cpu(record: dict[str, Any]) -> bool:
    """Whether a record ran on one thread (its probe's threads) and kept its CPU-clock phases."""
    probe, cpu = record.get("cpu_rate"), record.get("cpu")
    if not (isinstance(probe, dict) and probe.get("threads") == 1 and probe_rate(record)):
        return False
    if not isinstance(cpu, dict) or not isinstance(cpu.get("phases"), dict):
        return False
    return isinstance(cpu.get("s_per_step"), int | float) and cpu["s_per_step"] > 0


def _on_cpu_clock(record: dict[str, Any]) -> dict[str, Any]:
    """A copy of `record` whose phases, total and s/step are its CPU-clock ones (a phase the CPU
    part lacks: its wall-clock value), and its sample round's fixed part (`sample_fixed_s`, timed on
    the wall clock inside its rounds) at its rounds' CPU over wall seconds (RELIABILITY 1312)."""
    cpu = record["cpu"]
    phases = {**record["phases"], **cpu["phases"]}
    out = {
        **record,
        "phases": phases,
        "total_s": cpu.get("total_s", sum(phases.values())),
        "s_per_step": cpu["s_per_step"],
        "clock": "cpu",
    }
    fixed, wall_rounds = record.get("sample_fixed_s"), record["phases"].get("sample_rounds")
    cpu_rounds = phases.get("sample_rounds")
    numbers = all(isinstance(v, int | float) and math.isfinite(v) for v in (fixed, wall_rounds, cpu_rounds))
    if numbers and wall_rounds > 0:
        out["sample_fixed_s"] = fixed * min(cpu_rounds / wall_rounds, 1.0)
    return out


def recent_factor(home: Path, now: float | None = None) -> float | None:
    """The newest record's wall seconds over its CPU seconds (its `total_s` over its `cpu` part's),
    where it is a one-thread CPU run's written within RECENT_S of `now` (default: the time);
    None otherwise (none, older, a GPU's or several threads', unreadable)."""
    folder = home / HISTORY_DIR
    newest = max(folder.glob("*.json"), key=record_order, default=None) if folder.is_dir() else None
    if newest is None:
        return None
    try:
        age = (time.time() if now is None else now) - newest.stat().st_mtime
        record = json_read.loads(newest.read_text())
    except (OSError, ValueError):
        return None
    if age > RECENT_S or not isinstance(record, dict) or not _one_thread_cpu(record):
        return None
    wall, cpu = record.get("total_s"), record["cpu"].get("total_s")
    numbers = all(isinstance(v, int | float) and math.isfinite(v) and v > 0 for v in (wall, cpu))
    return max(wall / cpu, 1.0) if numbers else None


def contended(forecast: dict[str, Any], share: float, recent: float | None = None) -> dict[str, Any]:
    """`forecast` (time_forecast's section, in CPU seconds: made from cpu_clocked records) in wall
    seconds: each phase x 1 / `share` (the share of one core a busy thread got in the check,
    host_share.HostShare.share), or where `recent` (recent_factor: the newest run's wall over CPU
    seconds) is known, x the geometric mean of the two; its CPU seconds kept as `cpu_s`, the share
    as `host_share`, the factor as `wall_per_cpu`, the note and each phase's basis saying so."""
    share = min(max(share, 0.01), 1.0)  # a stalled clock's 0: at most 100x
    factor = math.sqrt(recent / share) if recent else 1 / share
    words = (
        f"; on the CPU clock (the records' one-thread CPU seconds) x {factor:.2f} wall seconds a CPU"
        f" second: 1 / {share:.2f}, the share of a core this check's busy bursts got"
        + (f", with the newest run's own {recent:.2f} (their geometric mean)" if recent else "")
    )
    phases = []
    for p in forecast["phases"]:
        phases.append({**p, "seconds": round(p["seconds"] * factor, 2), "basis": p["basis"] + words})
    return {
        **forecast,
        "phases": phases,
        "total_s": round(sum(p["seconds"] for p in phases), 1),
        "cpu_s": forecast["total_s"],
        "host_share": round(share, 3),
        "wall_per_cpu": round(factor, 3),
        "note": forecast["note"] + words,
    }
