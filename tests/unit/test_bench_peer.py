"""bench/peer_musubi.py: musubi-tuner's own Qwen-Image LoRA training loop driven by our harness
(the CPU proof of the GPU call's paths and key names), and its steady-state arithmetic."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from bench.peer_musubi import PEER, ROOT, steady, table, write_result


def test_steady_figures_drop_the_warmup_steps_and_reset_nothing_else():
    # step ends: step 1 at 10.0, steps 2-3 slow (warm-up), then 0.5 s steps
    timing = {"step_end_s": [10.0, 13.0, 14.0, 14.5, 15.0, 15.5], "peak_gib_steady": 70.1, "finished": True}
    row = steady(timing, warm=3)  # steps 2 and 3 are warm-up: intervals of steps 4, 5, 6 remain
    assert row["steps_done"] == 6 and row["steps_timed"] == 3
    assert row["s_per_step"] == 0.5 and row["samples_per_s"] == 2.0 and row["spread"] == 0.0
    assert row["warmup_steps_s"] == [3.0, 1.0] and row["peak_gib_steady"] == 70.1
    assert steady({"step_end_s": [1.0]}, warm=0) == {"steps_done": 1, "steps_timed": 0}


def test_table_gives_each_row_its_ratio_to_the_same_calls_plain_step():
    peer = [
        {
            "trainer": "musubi-tuner",
            "row": "bf16",
            "s_per_step": 0.8,
            "samples_per_s": 1.25,
            "peak_gib_steady": 60,
        }
    ]
    ours = [
        {
            "trainer": "lorastudio",
            "family": "qwen",
            "variant": "base",
            "batch": 1,
            "samples_per_s": 1.0,
            "peak_gib": 73,
        },
        {
            "trainer": "lorastudio",
            "family": "qwen",
            "variant": "fp8+cudnn+lag",
            "batch": 1,
            "samples_per_s": 2.5,
        },
    ]
    md = table(peer, ours)
    assert "| musubi-tuner | bf16 | 0.8 | 1.25 | 1.25x | 60 |" in md
    assert "| lorastudio | qwen:fp8+cudnn+lag@1 | - | 2.5 | 2.50x | - |" in md


def test_result_files_carry_each_rows_ratio_to_the_plain_step(tmp_path: Path):
    result = {
        "peer": [
            {"trainer": "musubi-tuner", "row": "bf16", "samples_per_s": 1.5},
            {"trainer": "musubi-tuner", "row": "compile", "timeout_s": 200},
        ],
        "ours": [
            {"trainer": "lorastudio", "family": "qwen", "variant": "base", "batch": 1, "samples_per_s": 1.2}
        ],
    }
    md = write_result(tmp_path, result, t0=0.0)
    written = json.loads((tmp_path / "peer.json").read_text())
    assert written["peer"][0]["x_plain"] == 1.25 and "x_plain" not in written["peer"][1]
    assert written["ours"][0]["x_plain"] == 1.0 and (tmp_path / "peer.md").read_text() == md
    assert sorted(p.name for p in tmp_path.iterdir()) == ["peer.json", "peer.md"]  # no staged files left


def _tiny_command(out: Path, work: Path) -> list[str]:
    """bench.peer_musubi --tiny, writing to `out`, its weights under `work`."""
    return [sys.executable, "-m", "bench.peer_musubi", "--tiny", "--out", str(out), "--work", str(work)]


@pytest.mark.slow  # ~35 s on 2 cores: musubi's imports, a 1-block model written and loaded
@pytest.mark.skipif(
    not (PEER / "musubi" / "src").is_dir(), reason="run bash bench/peer/fetch_musubi.sh --local"
)
def test_tiny_run_trains_two_steps_through_musubis_own_loop(tmp_path: Path):
    out = tmp_path / "out"
    cmd = _tiny_command(out, tmp_path / "w")
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads((out / "peer.json").read_text())
    assert result["musubi_commit"] == (PEER / "musubi" / "COMMIT").read_text().strip()
    (row,) = result["peer"]
    assert row["returncode"] == 0 and row["finished"] and row["steps_done"] == 2 and row["samples_per_s"] > 0
    log = (out / "musubi_bf16.log").read_text()
    assert "All keys matched successfully" in log  # our weight file has musubi's key names (strict load)
    assert "create LoRA for U-Net/DiT: 14 modules" in log  # its default targets, rank 16
    assert "saving checkpoint" in log  # its loop ran to the end
    assert not (tmp_path / "w").exists()  # the weights are removed before our rows


@pytest.mark.slow  # ~35 s: as above
@pytest.mark.skipif(
    not (PEER / "musubi" / "src").is_dir(), reason="run bash bench/peer/fetch_musubi.sh --local"
)
def test_tiny_run_ends_through_musubis_step_budget_once_the_steady_window_is_timed(tmp_path: Path):
    out = tmp_path / "out"
    cmd = _tiny_command(out, tmp_path / "w")
    cmd += ["--steps", "8", "--warm", "1", "--steady-s", "0.01"]  # steady after step 2
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (row,) = json.loads((out / "peer.json").read_text())["peer"]
    assert row["steps_done"] == 2 and row["steps_timed"] == 1 and row["finished"]  # not 8
    assert "saving checkpoint" in (out / "musubi_bf16.log").read_text()


def test_step_clock_ends_the_run_once_the_steady_steps_span_the_asked_seconds(tmp_path: Path, monkeypatch):
    from bench.peer import musubi_run

    clock_times = iter([10.0, 11.0, 11.5, 12.0, 12.6])
    monkeypatch.setattr(musubi_run.time, "monotonic", lambda: next(clock_times))
    clock = musubi_run.StepClock(tmp_path / "timing.json", warm=2, steady_s=1.0, standins=["av"])
    # steps 1-2 are warm-up; the steady window starts at step 2's end (11.0)
    assert [clock.tick() for _ in range(4)] == [False, False, False, True]
    written = json.loads((tmp_path / "timing.json").read_text())
    assert written["step_end_s"] == [10.0, 11.0, 11.5, 12.0] and written["standins"] == ["av"]
    assert steady(written, warm=2) == {
        "steps_done": 4,
        "steps_timed": 2,
        "s_per_step": 0.5,
        "s_per_step_median": 0.5,
        "spread": 0.0,
        "samples_per_s": 2.0,
        "steady_window_s": 1.0,
        "warmup_steps_s": [1.0],
        "standins": ["av"],
    }
    never = musubi_run.StepClock(tmp_path / "t2.json", warm=0, steady_s=0.0, standins=[])
    assert never.tick() is False  # steady_s 0: musubi's own step budget ends the run
