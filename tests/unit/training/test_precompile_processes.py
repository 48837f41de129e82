"""Dynamo's saved output across processes (training/speed/precompile.py): the tiny FLUX.1's second
process on one cache folder loads both block graphs (the double and the single block) instead of
tracing them, Dynamo compiles no frame in its first step, and the loss is the first process's.
Slow: three fresh processes (torch's imports, one trace each way)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lorastudio.training.speed.precompile import saved_backends, torch_cannot_precompile

ROOT = Path(__file__).resolve().parents[3]
# aot_eager where this torch can save its output (2.13); torch 2.11 saves Inductor's only
BACKEND = "aot_eager" if "aot_eager" in saved_backends() else "inductor"


def _first_step(cache: Path, flag: str) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "LORASTUDIO_PRECOMPILE": flag}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.precompile_first_step",
            "tiny-child",
            str(cache),
            "--backend",
            BACKEND,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _dynamo_s(run: dict) -> float:
    return sum(v for k, v in run["report"].items() if k.endswith("_compile.compile_inner"))


@pytest.mark.slow
@pytest.mark.skipif(torch_cannot_precompile() is not None, reason="this torch has no aot_compile")
def test_a_second_process_loads_the_tiny_flux_block_graphs(tmp_path: Path) -> None:
    off = _first_step(tmp_path, "0")
    saved = _first_step(tmp_path, "1")
    loaded = _first_step(tmp_path, "1")
    assert _dynamo_s(off) > 0 and off["report"]["stats.unique_graphs"] == 2
    assert saved["report"]["precompile.saved"] == 2 and saved["report"]["precompile.fallback"] == 0
    assert loaded["report"]["precompile.hit"] == 2 and loaded["report"]["precompile.saved"] == 0
    assert _dynamo_s(loaded) == 0 and loaded["report"]["stats.unique_graphs"] == 0  # nothing traced
    assert loaded["report"]["precompile.guard_miss"] == 0
    assert loaded["loss"] == pytest.approx(off["loss"], rel=1e-6)
    assert saved["loss"] == pytest.approx(off["loss"], rel=1e-6)


@pytest.mark.slow
@pytest.mark.skipif(torch_cannot_precompile() is not None, reason="this torch has no aot_compile")
def test_a_second_run_of_the_engine_loads_the_saved_block_graphs(
    make_config, monkeypatch, tmp_path: Path
) -> None:
    """The engine's own path (train(): plan_build's compile_denoiser, the step loop): the second
    run of one config loads its block graphs, and its losses are the first run's and the eager
    run's (compile forced on the CPU with aot_eager, Inductor on torch 2.11, as test_compile does
    with eager)."""
    import torch

    from lorastudio.training import loop_phases
    from lorastudio.training.loop import train
    from lorastudio.training.speed import compile as compile_module
    from lorastudio.training.speed import precompile

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv(precompile.ENV, "1")  # off by default
    eager = train(make_config("flux", batch_size=1, output_name="eager"), lambda _e: None, device="cpu")
    real_compile = compile_module.compile_denoiser
    monkeypatch.setattr(loop_phases, "wants_compile", lambda mode, device: True)
    monkeypatch.setattr(
        compile_module, "compile_denoiser", lambda *a, **k: real_compile(*a, **{**k, "backend": BACKEND})
    )
    for name in precompile.COUNTERS:
        monkeypatch.setitem(precompile.COUNTERS, name, 0)
    torch._dynamo.reset()
    first = train(make_config("flux", batch_size=1, output_name="first"), lambda _e: None, device="cpu")
    assert precompile.COUNTERS["saved"] == 2 and precompile.COUNTERS["hit"] == 0
    torch._dynamo.reset()
    second = train(make_config("flux", batch_size=1, output_name="second"), lambda _e: None, device="cpu")
    assert precompile.COUNTERS["hit"] == 2 and precompile.COUNTERS["saved"] == 2
    assert precompile.COUNTERS["fallback"] == 0
    assert first.losses == pytest.approx(eager.losses, rel=1e-5)
    assert second.losses == pytest.approx(first.losses, rel=1e-6)
