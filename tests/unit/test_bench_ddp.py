"""The 2-GPU data-parallel benchmark (bench/bench_ddp.py) rehearsed on the CPU: `--tiny FAMILY`
launches the engine's step under torchrun with 1 and then 2 gloo ranks on the tiny denoiser, at
global batches 2 and 4. Both runs report timed rows; with the same global batch and seed the
2-rank run computes the 1-rank run's step losses and gradient norms (DDP averages the LoRA
gradients of the two halves into the global batch's gradient: the norms are what shows it, as
AdamW's first steps barely depend on the gradient's scale); the ratio rows are the measured
rates' quotient. Bad global batch sizes are refused before anything is launched.

FLUX.1 runs by default (~20 s); Qwen-Image, the GPU run's other family, is marked slow (one more
~20 s run): its last block's to_add_out LoRA never gets a gradient, which DDP must tolerate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # the GPU bench harness on the CPU (bench/, not the product)

REPO = Path(__file__).resolve().parents[2]
BATCHES = (2, 4)
# One process computes a batch of 2 in one forward, two compute one sample each: float32 noise
# in the summation order, far below what a wrong shard, scale or missing all-reduce gives.
RTOL = 1e-5

Run = tuple[str, Path, list[dict[str, Any]]]


def _bench(out: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "bench.bench_ddp", "--out", str(out), *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module", params=["flux", pytest.param("qwen", marks=pytest.mark.slow)])
def tiny_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One `--tiny FAMILY` benchmark run (1 then 2 ranks): the family, its out folder, its rows."""
    family = request.param
    out = tmp_path_factory.mktemp(f"ddp-{family}")
    batches = ",".join(map(str, BATCHES))
    proc = _bench(out, "--deadline-s", "150", "--tiny", "--batches", batches, family, timeout=200)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "ddp.jsonl").read_text().splitlines()]
    return family, out, rows


def _timed(rows: list[dict[str, Any]], world: int, batch: int) -> dict[str, Any]:
    found = [r for r in rows if r.get("world_size") == world and r.get("global_batch") == batch]
    assert len(found) == 1, f"no single row for {world} rank(s) at batch {batch}: {rows}"
    return found[0]


def test_both_runs_report_a_timed_row_per_global_batch(tiny_run: Run):
    family, out, rows = tiny_run
    for world in (1, 2):
        assert (out / f"ddp-{family}-w{world}.log").is_file()
        for batch in BATCHES:
            row = _timed(rows, world, batch)
            assert row["family"] == family and row["mode"] == "tiny" and row["device"] == "cpu"
            assert row["local_batch"] == batch // world
            assert row["s_per_step"] > 0
            assert row["samples_per_s_raw"] == pytest.approx(batch / row["s_per_step"], rel=1e-3)
            assert len(row["peak_gib_per_rank"]) == world and all(p > 0 for p in row["peak_gib_per_rank"])
            assert row["compiled"] is False  # the CPU rehearsal runs eagerly
            assert len(row["losses"]) == 4 and all(0 < x < 100 for x in row["losses"])


def test_two_ranks_compute_the_losses_and_gradient_norms_of_one_rank(tiny_run: Run):
    _, _, rows = tiny_run
    for batch in BATCHES:
        one, two = _timed(rows, 1, batch), _timed(rows, 2, batch)
        assert two["losses"][0] == pytest.approx(one["losses"][0], rel=RTOL)  # the first step
        assert two["losses"] == pytest.approx(one["losses"], rel=RTOL)  # after optimizer steps too
        assert two["grad_norms"] == pytest.approx(one["grad_norms"], rel=RTOL)
        assert one["grad_norms"][0] > 0


def test_the_ratio_rows_are_the_measured_rates_quotient(tiny_run: Run):
    family, out, rows = tiny_run
    ratios = {r["global_batch"]: r for r in rows if r.get("case") == "ratio"}
    assert sorted(ratios) == list(BATCHES)
    table = (out / "ddp-table.md").read_text()
    for batch, r in ratios.items():
        one, two = _timed(rows, 1, batch), _timed(rows, 2, batch)
        expected = two["samples_per_s_raw"] / one["samples_per_s_raw"]
        assert r["family"] == family
        assert r["ratio"] == pytest.approx(expected, abs=1e-4)
        assert r["met"] is (expected >= r["target"])
        assert r["loss_max_rel_diff"] <= RTOL
        assert f"{family} global batch {batch}: 2 ranks" in table and f"= {r['ratio']:.3f}x" in table


@pytest.mark.parametrize(("batches", "reason"), [("3", "does not divide by the 2"), ("2,x", "'x' is not")])
def test_a_batch_the_two_ranks_cannot_split_is_refused_before_launching(tmp_path, batches, reason):
    proc = _bench(tmp_path, "--tiny", "--batches", batches, "flux", timeout=60)
    assert proc.returncode == 2
    assert reason in proc.stderr
    assert not (tmp_path / "ddp.jsonl").exists()
