"""The wall-time forecast of a CPU run on a shared host (issue 31 item 5, bench/RESULTS note 48):
the records' one-thread CPU seconds over the share of a core a busy thread gets now
(jobs/time_contention.py, lorastudio/host_share.py). Recorded numbers only: no timed assertion."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lorastudio.api.schemas_preflight import TimeForecast
from lorastudio.config import TrainConfig
from lorastudio.host_share import BURSTS, HostShare
from lorastudio.jobs.hardware import HostInfo, precisions_for
from lorastudio.jobs.time_contention import RECENT_S, contended, cpu_clocked, recent_factor
from lorastudio.jobs.time_forecast import time_forecast
from lorastudio.timings import PHASES, run_signature, write_record

CPU = HostInfo("cpu", "cpu", None, precisions_for("cpu"))
PLAN = {"base_precision": "fp32", "gradient_checkpointing": "off", "offload_blocks": 0, "micro_batch_size": 1}


class Recorded(HostShare):
    """A meter whose bursts are recorded (CPU s, wall s) pairs, not run."""

    def __init__(self, bursts: list[tuple[float, float]]):
        super().__init__()
        self.recorded: Iterator[tuple[float, float]] = iter(bursts)

    def burst(self) -> None:
        self.add(*next(self.recorded))


def _record(base: Path, wall: float, cpu: float | None, threads: int = 1, device: str = "cpu") -> dict:
    """A 256 px tiny FLUX.1 record of 11 steps, each phase `wall` s (`cpu` s on the CPU clock)."""
    sig = run_signature(
        family="flux", base_model=str(base), denoiser="transformer", device_name=device, plan=PLAN,
        compiled=False, attention_backend="auto", buckets={"256x256": 1}, batch_size=1, grad_accum=1,
        lora_rank=4,
    )  # fmt: skip
    record = {
        "signature": sig,
        "phases": dict.fromkeys(PHASES, wall) | {"sample_rounds": 0.0},
        "s_per_step": wall / 10,
        "total_s": wall * (len(PHASES) - 1),
        "steps": 11,
        "texts": 1,
        "latents_encoded": 1,
        "sample_rounds": 0,
        "cpu_rate": {"matmul_flops": 9e10, "threads": threads, "torch": "x"},
    }
    if cpu is not None:
        phases = dict.fromkeys(PHASES, cpu) | {"sample_rounds": 0.0}
        record["cpu"] = {"phases": phases, "total_s": sum(phases.values()), "s_per_step": cpu / 10}
    return record


def test_the_share_is_the_bursts_cpu_over_their_wall_seconds() -> None:
    """CPU over wall seconds of all the bursts together, BURSTS of them at least; at most 1 (two
    threads' clocks), and a clock that did not move measures nothing (1)."""
    meter = Recorded([(0.025, 0.05), (0.025, 0.1), (0.025, 0.15), (9.0, 9.0)])
    meter.burst()  # the check's start
    assert meter.share() == pytest.approx(0.075 / 0.3) and meter.bursts == BURSTS == 3
    assert Recorded([(0.03, 0.02)] * 3).share() == 1.0
    assert Recorded([(0.0, 0.0)] * 3).share() == 1.0
    live = HostShare(burst_cpu_s=0.001)
    assert 0 < live.share() <= 1 and live.bursts == BURSTS and live.cpu_s >= 0.003


def test_a_cpu_run_is_forecast_from_its_records_cpu_seconds_over_the_share_now(tmp_path: Path) -> None:
    """A record made at a heavy load (each phase 3 s of wall time, 1 s of CPU) forecasts the same
    run, at a share of a core of 0.5 now, as 2 s a phase: its CPU seconds over the share, not the
    load it ran under; before, 3 s (the record's wall time, whatever the host gives now)."""
    base = tmp_path / "base"  # no headers: the same size, so every phase is the record's
    write_record(tmp_path, "loaded", _record(base, wall=3.0, cpu=1.0))
    write_record(tmp_path, "older", _record(base, wall=9.0, cpu=None))  # no CPU clock: left out
    cfg = TrainConfig(
        family="flux", base_model=str(base), data_dir="d", steps=11, lora_rank=4, resolution=256
    )
    work = {"steps": 11, "texts": 1, "images": 1, "buckets": {"256x256": 1}}
    meter = Recorded([(0.025, 0.05)] * 3)
    forecast = time_forecast(cfg, base, CPU, PLAN, False, work, tmp_path, meter)
    got = {p["name"]: p["seconds"] for p in forecast["phases"]}
    assert got["weights_load"] == pytest.approx(2.0) and got["steps"] == pytest.approx(2.0)
    assert forecast["host_share"] == 0.5 and forecast["runs"] == 1
    assert forecast["cpu_s"] == pytest.approx(forecast["total_s"] / 2, abs=0.1)
    assert "share of a core" in forecast["note"] and "CPU clock" in forecast["note"]
    assert all(
        "x 2.00 wall seconds a CPU second: 1 / 0.50, the share of a core" in p["basis"]
        for p in forecast["phases"]
    )


def test_records_of_several_threads_or_another_device_keep_their_wall_clock(tmp_path: Path) -> None:
    """A record of two threads sums both threads' CPU seconds, which one thread's share does not
    turn into wall time: where no one-thread record has a CPU clock, the records stay as they are
    (the wall-clock forecast, no share taken); a GPU record is never read on the CPU clock."""
    base = tmp_path / "base"
    two = [_record(base, wall=3.0, cpu=5.0, threads=2)]
    assert cpu_clocked(two, "cpu") is two
    gpu = _record(base, wall=3.0, cpu=1.0, device="NVIDIA H100")
    assert cpu_clocked([gpu], "NVIDIA H100") == [gpu]
    one = _record(base, wall=3.0, cpu=1.0)
    mixed = cpu_clocked([gpu, *two, one], "cpu")
    assert [r["phases"]["steps"] for r in mixed] == [3.0, 1.0]  # the GPU's as it is, the one thread's CPU
    assert mixed[1]["s_per_step"] == 0.1 and mixed[1]["clock"] == "cpu"


def test_the_newest_recent_runs_own_factor_joins_the_share(tmp_path: Path) -> None:
    """Where the newest record is a one-thread CPU run written within RECENT_S, its own wall over
    CPU seconds (the host's load over a whole run) and 1 / the check's share are averaged
    geometrically (note 48: 9 of 16 runs' factors within 15 % against 6-7 for either alone); an
    older record, or a GPU's, leaves the share alone."""
    base = tmp_path / "base"
    path = write_record(tmp_path, "newest", _record(base, wall=3.0, cpu=1.0))  # 3 wall s a CPU s
    made = path.stat().st_mtime
    assert recent_factor(tmp_path, now=made + 60) == pytest.approx(3.0)
    assert recent_factor(tmp_path, now=made + RECENT_S + 1) is None
    section = {"phases": [{"name": "steps", "seconds": 2.0, "basis": "b"}], "total_s": 2.0, "note": "n"}
    both = contended(section, 0.75, 3.0)  # 1 / 0.75 and 3: sqrt(4) = 2
    assert both["phases"][0]["seconds"] == pytest.approx(4.0) and both["wall_per_cpu"] == 2.0
    assert "newest run's own 3.00" in both["phases"][0]["basis"] and both["cpu_s"] == 2.0
    assert contended(section, 0.75)["total_s"] == pytest.approx(2.7)  # the share alone
    section |= {"source": "history", "confidence": "measured", "runs": 1}
    section["phases"][0]["name"] = "steps"
    out = TimeForecast.model_validate(contended(section, 0.75, 3.0))  # the API's answer keeps them
    assert (out.cpu_s, out.host_share, out.wall_per_cpu) == (2.0, 0.75, 2.0)
    write_record(tmp_path, "gpu", _record(base, wall=3.0, cpu=1.0, device="NVIDIA H100") | {"cpu_rate": None})
    assert recent_factor(tmp_path) is None


def test_a_rounds_fixed_part_is_read_on_the_cpu_clock_too(tmp_path: Path) -> None:
    """A record's `sample_fixed_s` is timed on the wall clock inside its rounds: on the CPU clock
    it is taken at the rounds' CPU over wall seconds (RELIABILITY 1312). Before, a round of 0.32
    CPU s beside a fixed part of 0.9 wall s (flux-256-sample under load, RESULTS note 48) was all
    fixed part, so a 1024 px run's round was forecast at 0.32 CPU s (3.65 measured)."""
    record = _record(tmp_path / "base", wall=3.0, cpu=1.0) | {"sample_rounds": 1, "sample_fixed_s": 0.9}
    record["phases"]["sample_rounds"], record["cpu"]["phases"]["sample_rounds"] = 3.0, 1.0
    (clocked,) = cpu_clocked([record], "cpu")
    assert clocked["sample_fixed_s"] == pytest.approx(0.3) and record["sample_fixed_s"] == 0.9
    assert clocked["phases"]["sample_rounds"] == 1.0
    unsampled = _record(tmp_path / "base", wall=3.0, cpu=1.0)
    assert "sample_fixed_s" not in cpu_clocked([unsampled], "cpu")[0]


def test_a_burst_ends_when_the_thread_cpu_clock_does_not_move() -> None:
    """A thread CPU clock stuck at 0 (a sandbox's) spun the preflight's burst for ever: it now ends
    after BURST_WALL_MAX_S of wall time, and the share is 1 (nothing measured)."""
    wall = iter(float(i) / 10 for i in range(10_000))  # 0.1 s a read
    reads = iter(range(1_000))  # the old loop read the stuck clock until this runs out

    def stuck() -> float:
        next(reads)
        return 0.0

    meter = HostShare(clocks=(lambda: next(wall), stuck))
    assert meter.share() == 1.0
    assert meter.bursts == BURSTS
