"""The wall-time forecast of a CPU run on a shared host: the run's CPU seconds, forecast from the
records' CPU-clock phases, over the share of a core the host gives a busy thread now
(lorastudio/host_share.py), in place of the records' wall-clock phases, which carry the load of
whenever they ran (RESULTS notes 46 and 48). No torch.

Only records of one thread are read so: with one thread a run's CPU seconds are its work whatever
else runs, and its wall seconds that work over its share of one core. A record of several threads
sums its threads' CPU seconds, which no one-thread share turns into wall time; such records keep
their wall-clock phases (Known problems)."""

from __future__ import annotations

from typing import Any

from lorastudio.jobs.time_rate import probe_rate


def cpu_clocked(records: list[dict[str, Any]], device: str) -> list[dict[str, Any]]:
    """`records` with each one-thread CPU record of `device` ("cpu") read on the CPU clock: its
    `cpu` part's phases, total and s/step in place of its wall-clock ones (timings.PhaseClock
    .cpu_stamped, RELIABILITY 1213). Where any record of the device has such a part, the device's
    records without one (older, or several threads) are left out, so one forecast reads one
    clock; where none has, `records` as they are. Other devices' records are kept as they are."""
    if device != "cpu":
        return records
    here = [r for r in records if r["signature"].get("device_name") == device]
    clocked = [_on_cpu_clock(r) for r in here if _one_thread_cpu(r)]
    if not clocked:
        return records
    return [r for r in records if r["signature"].get("device_name") != device] + clocked


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
    part lacks: its wall-clock value)."""
    cpu = record["cpu"]
    phases = {**record["phases"], **cpu["phases"]}
    return {
        **record,
        "phases": phases,
        "total_s": cpu.get("total_s", sum(phases.values())),
        "s_per_step": cpu["s_per_step"],
        "clock": "cpu",
    }


def contended(forecast: dict[str, Any], share: float) -> dict[str, Any]:
    """`forecast` (time_forecast's section, in CPU seconds: made from cpu_clocked records) in wall
    seconds: each phase over `share` (the share of one core a busy thread got in the check,
    host_share.HostShare.share), its CPU seconds kept as `cpu_s` and the share as `host_share`,
    the note and each phase's basis saying so."""
    share = min(max(share, 0.01), 1.0)  # a stalled clock's 0: at most 100x
    words = (
        f"; on the CPU clock (the records' one-thread CPU seconds) over {share:.2f}, the share of a"
        " core this check's busy bursts got (their CPU seconds over their wall seconds)"
    )
    phases = []
    for p in forecast["phases"]:
        phases.append({**p, "seconds": round(p["seconds"] / share, 2), "basis": p["basis"] + words})
    return {
        **forecast,
        "phases": phases,
        "total_s": round(sum(p["seconds"] for p in phases), 1),
        "cpu_s": forecast["total_s"],
        "host_share": round(share, 3),
        "note": forecast["note"] + words,
    }
