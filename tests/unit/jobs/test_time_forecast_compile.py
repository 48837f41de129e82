"""The forecast's first step by how the run's compile will go: from the on-disk compile cache
(an earlier run of the same base and plan filled it) or compiled afresh. On the H200 the e2e
FLUX.1 run's first step took 28.8 s compiling and 6.5 s from the cache (bench/RESULTS note 27):
a forecast that took the first run's figure for the second was 33 % over."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from lorastudio.config import TrainConfig
from lorastudio.jobs.hardware import HostInfo, precisions_for
from lorastudio.jobs.time_forecast import WARM_COMPILE_SHARE, time_forecast
from lorastudio.timings import PHASES, run_signature, write_record
from lorastudio.training.planning.run_timings import compile_cache_counts, compile_cache_state

GPU = HostInfo("cuda", "NVIDIA H200", 139.8, precisions_for("cuda", (9, 0)), gpu_count=1)
PLAN = {"base_precision": "bf16", "gradient_checkpointing": "off", "offload_blocks": 0, "micro_batch_size": 1}


def _base(tmp_path: Path) -> Path:
    base = tmp_path / "base"
    (base / "transformer").mkdir(parents=True)
    with open(base / "transformer" / "model.safetensors", "wb") as f:
        f.truncate(1_000_000)
    return base


def _record(home: Path, base: Path, name: str, first_step: float, cache: str | None) -> None:
    signature = run_signature(
        family="flux",
        base_model=str(base),
        denoiser="transformer",
        device_name=GPU.name,
        plan=PLAN,
        compiled=True,
        attention_backend="auto",
        buckets={"1024x1024": 4},
        batch_size=1,
        grad_accum=1,
        lora_rank=TrainConfig(family="flux", base_model="x", data_dir="d").lora_rank,
    )
    phases = dict.fromkeys(PHASES, 1.0) | {"first_step": first_step, "steps": 9.0}
    record = {"signature": signature, "phases": phases, "s_per_step": 1.0, "steps": 10}
    write_record(home, name, record | ({"compile_cache": cache} if cache else {}))


def _first_step(home: Path, base: Path) -> dict:
    cfg = TrainConfig(family="flux", base_model=str(base), data_dir="d", resolution=1024, steps=10)
    work = {"steps": 10, "texts": 1, "images": 4, "buckets": {"1024x1024": 4}}
    forecast = time_forecast(cfg, base, GPU, PLAN, True, work, home)
    assert forecast["source"] == "history"
    return {p["name"]: p for p in forecast["phases"]}["first_step"]


def test_a_cold_first_run_forecasts_a_warm_second_when_the_compile_cache_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    home, base = tmp_path / "home", _base(tmp_path)
    _record(home, base, "first", 28.8, "cold")
    cleared = _first_step(home, base)  # no compile cache on disk: this run compiles again
    assert cleared["seconds"] == pytest.approx(28.8) and "compiled afresh" in cleared["basis"]
    (home / "cache" / "inductor" / "fxgraph").mkdir(parents=True)  # the first run's compiles, kept
    warm = _first_step(home, base)
    assert warm["seconds"] == pytest.approx(28.8 * WARM_COMPILE_SHARE, abs=0.01)
    assert "from the compile cache" in warm["basis"] and "scaled from cold" in warm["basis"]
    _record(home, base, "second", 6.5, "warm")  # measured warm runs are taken as they are
    both = _first_step(home, base)
    assert both["seconds"] == pytest.approx((6.5 + 28.8 * WARM_COMPILE_SHARE) / 2, abs=0.01)


def test_records_before_the_compile_cache_key_are_taken_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, base = tmp_path / "home", _base(tmp_path)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "ind"))
    (tmp_path / "ind" / "x").mkdir(parents=True)
    _record(home, base, "old", 20.0, None)
    assert _first_step(home, base)["seconds"] == pytest.approx(20.0)


def test_the_compile_kind_is_this_runs_own_count_of_cache_misses_and_hits() -> None:
    """A worker that trains twice: the second run's record counts its own compiles, not the
    first run's (Dynamo's counters are per process)."""
    from torch._dynamo.utils import counters

    inductor = counters["inductor"]
    inductor["fxgraph_cache_miss"] += 3  # an earlier run in this process compiled afresh
    start = compile_cache_counts()
    assert compile_cache_state(start, compiled=True) is None  # nothing compiled since
    inductor["fxgraph_cache_hit"] += 2
    assert compile_cache_state(start, compiled=True) == "warm"
    inductor["fxgraph_cache_miss"] += 1
    assert compile_cache_state(start, compiled=True) == "cold"
    assert compile_cache_state(start, compiled=False) is None


@pytest.mark.slow
def test_the_run_record_says_whether_its_graphs_came_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dynamo's own counters of a real compile: afresh into an empty cache, then (Dynamo reset, the
    same function) from it."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * 2 + 1

    x = torch.randn(8)
    assert compile_cache_state(compile_cache_counts(), compiled=False) is None
    torch._dynamo.reset()
    start = compile_cache_counts()
    torch.compile(f)(x)
    assert compile_cache_state(start, compiled=True) == "cold"
    torch._dynamo.reset()
    start = compile_cache_counts()
    torch.compile(f)(x)
    assert compile_cache_state(start, compiled=True) == "warm"
    assert os.listdir(tmp_path / "inductor")


def test_another_bases_run_of_another_plan_is_a_guess_and_one_of_this_plan_is_preferred(
    tmp_path: Path,
) -> None:
    """Found from outside: 1000 tiny SDXL steps forecast at ~5 h, scaled from an nf4 CPU run of
    another base as if a bf16 step took as long."""
    home, base = tmp_path / "home", _base(tmp_path)
    other = tmp_path / "other"
    _record(home, other, "nf4", 5.0, None)  # another base; its plan is rewritten to nf4 below
    (path,) = (home / "run_timings").glob("*.json")
    path.write_text(path.read_text().replace('"base_precision": "bf16"', '"base_precision": "nf4"'))
    cfg = TrainConfig(family="flux", base_model=str(base), data_dir="d", resolution=1024, steps=10)
    work = {"steps": 10, "texts": 1, "images": 4, "buckets": {"1024x1024": 4}}
    guess = time_forecast(cfg, base, GPU, PLAN, True, work, home)
    assert guess["source"] == "machine" and guess["confidence"] == "guess"
    assert "nf4" in guess["note"] and "this run: bf16" in guess["note"]
    _record(home, other, "bf16", 5.0, None)  # the same plan on another base: taken alone
    scaled = time_forecast(cfg, base, GPU, PLAN, True, work, home)
    assert scaled["source"] == "machine" and scaled["confidence"] == "scaled" and scaled["runs"] == 1
