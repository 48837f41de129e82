"""kill -9 of one process of a data-parallel job: 2 gloo ranks on the CPU, launched by the job
service through torchrun exactly as GPU ranks are (settings.cpu_data_parallel), behind a real
uvicorn server. Each time the job must be reported failed within a few seconds with a message
naming what died, every process of the job (agent and ranks) must be gone, the GPU arbiter free,
no visible file of the run partial, and the next job must run.

Always on: rank 1 killed mid-run (checkpoints every 2 steps); its next job is the data-parallel
job check of tests/dp_jobs.py (a 2-rank job stops and saves, then resumes in one process). Slow:
rank 0 (the one that sends the events and writes the files), the torchrun agent itself, and the
server (a real `lorastudio serve` process): the agent and every rank die with it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from reliability_helpers import (
    FINAL,
    LiveServer,
    live_server,
    partial_files,
    process_alive,
    record_figure,
    serve_process,
    wait_for,
)

from dp_jobs import two_rank_job_stops_and_saves_and_resumes_in_one_process
from lorastudio.api.app import create_app
from lorastudio.settings import Settings

pytestmark = pytest.mark.slow  # two CPU ranks under torchrun: a heavy variant of the worker-death tests

DETECT_S = 5.0  # "within a few seconds"


@pytest.fixture
def dp_server(settings: Settings, shapes: Path) -> Iterator[LiveServer]:
    with live_server(create_app(settings.model_copy(update={"cpu_data_parallel": True}))) as live:
        yield live


def _children(pid: int) -> list[int]:
    """Child pids of process `pid` (every thread's children)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(child) for child in text]
    return found


def _rank_of(pid: int) -> int | None:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    for entry in environ:
        if entry.startswith(b"RANK="):
            return int(entry[5:])
    return None


def _kill_during_a_run(server: LiveServer, config: dict, victim: str) -> dict:
    client, service = server.client, server.app.state.service
    started = client.post("/api/train/start", json={"config": config})
    assert started.status_code in (200, 201), started.text
    job_id = started.json()["id"]
    wait_for(lambda: (service.job(job_id)["progress"] or {}).get("step", 0) >= 3, 240, "step 3", 0.02)
    agent = service.job(job_id)["pid"]
    ranks = {_rank_of(pid): pid for pid in _children(agent)}
    assert sorted(ranks) == [0, 1], ranks  # torchrun started one process per rank
    target = agent if victim == "agent" else ranks[int(victim[-1])]
    os.kill(target, signal.SIGKILL)
    t0 = time.monotonic()
    final = wait_for(
        lambda: (s := service.job(job_id))["status"] in FINAL and s, 30, "the failed status", 0.002
    )
    detected_s = time.monotonic() - t0
    arbiter_free = server.app.state.arbiter.training_job is None
    wait_for(
        lambda: not any(process_alive(p) for p in [agent, *ranks.values()]), 10, "every process gone", 0.005
    )
    gone_s = time.monotonic() - t0
    run_dir = server.app.state.settings.outputs_dir / config["output_name"]
    return {
        "victim": victim,
        "status": final["status"],
        "error": final["error"],
        "detected_s": round(detected_s, 3),
        "all_processes_gone_s": round(gone_s, 3),
        "arbiter_free_at_final": arbiter_free,
        "partial": partial_files(run_dir) if run_dir.exists() else [],
    }


def _check(result: dict, named: str) -> None:
    assert result["status"] == "failed", result
    assert named in result["error"] and "died" in result["error"], result["error"]
    assert result["detected_s"] < DETECT_S, result
    assert result["all_processes_gone_s"] < DETECT_S, result
    assert result["arbiter_free_at_final"], result
    assert result["partial"] == [], result


def _next_job_runs(server: LiveServer, flux_config: Callable[..., dict]) -> None:
    service = server.app.state.service
    started = server.client.post(
        "/api/train/start", json={"config": flux_config(output_name="after", steps=2)}
    )
    assert started.status_code in (200, 201), started.text
    job_id = started.json()["id"]
    final = wait_for(lambda: (s := service.job(job_id))["status"] in FINAL and s, 120, "the next job", 0.02)
    assert final["status"] == "completed", final["error"]


def _dp_config(flux_config: Callable[..., dict], victim: str) -> dict:
    return flux_config(
        output_name=f"dp-kill-{victim}", steps=400, batch_size=2, num_gpus=2, save_every=2, keep_last=2
    )


def test_kill_9_of_rank_1_fails_the_job_within_seconds_and_frees_everything(
    dp_server: LiveServer, flux_config: Callable[..., dict]
) -> None:
    result = _kill_during_a_run(dp_server, _dp_config(flux_config, "rank1"), "rank1")
    record_figure("rank_death_rank1", result)
    _check(result, "rank 1 of 2")
    # The next job runs: the always-on data-parallel job check (tests/dp_jobs.py, from
    # test_multi_gpu_jobs.py): a 2-rank job stops and saves, and resumes in one process to the
    # LoRA of one process. One torchrun launch serves both tests.
    two_rank_job_stops_and_saves_and_resumes_in_one_process(
        dp_server.app.state.service, dp_server.app.state.settings, Path(flux_config()["base_model"])
    )


@pytest.mark.slow
@pytest.mark.parametrize(("victim", "named"), [("rank0", "rank 0 of 2"), ("agent", "torchrun agent")])
def test_kill_9_of_rank_0_or_of_the_agent_fails_the_job_within_seconds(
    dp_server: LiveServer, flux_config: Callable[..., dict], victim: str, named: str
) -> None:
    result = _kill_during_a_run(dp_server, _dp_config(flux_config, victim), victim)
    record_figure(f"rank_death_{victim}", result)
    _check(result, named)
    _next_job_runs(dp_server, flux_config)


@pytest.mark.slow
def test_the_agent_and_every_rank_die_with_the_server(
    settings: Settings, shapes: Path, flux_config: Callable[..., dict]
) -> None:
    with serve_process(settings, {"LORASTUDIO_CPU_DATA_PARALLEL": "1"}) as (proc, client):
        started = client.post("/api/train/start", json={"config": _dp_config(flux_config, "server")})
        assert started.status_code in (200, 201), started.text
        job = wait_for(
            lambda: (
                (j := client.get("/api/train/status").json()["job"]) is not None and j["steps_run"] >= 3 and j
            ),
            240,
            "step 3",
            poll=0.05,
        )
        processes = [job["pid"], *_children(job["pid"])]
        assert len(processes) == 3  # the agent and its 2 ranks
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        t0 = time.monotonic()
        wait_for(
            lambda: not any(process_alive(p) for p in processes),
            DETECT_S,
            "the job's death",
            poll=0.01,
        )
        record_figure("rank_death_server", {"job_processes_gone_s": round(time.monotonic() - t0, 3)})
    assert partial_files(settings.outputs_dir / "dp-kill-server") == []
