"""Generation runs in a supervised worker process, never in the server (issue 24, part 3).

On a real `lorastudio serve` process with the tiny FLUX.1 model: the resident pipeline gives the
same image again; requests over the budget are refused (400) before any work; kill -9 of the
worker mid-request is a clear 503 while the server goes on, and the next request starts a fresh
worker that gives the same image; killing the server takes the worker with it. A worker that
runs into a memory limit (RLIMIT_AS) is reported the same way (a served app in this process, its
workers forked from the suite's zygote). The server process imports no pipeline code (a fresh
interpreter serving, its workers' pipeline a stand-in).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
from generation_fault_workers import OOM_PROMPT, STAND_IN_OOM, rlimited_generation_worker
from reliability_helpers import live_server, process_alive, record_figure, serve_process, wait_for

from lorastudio.api.app import create_app
from lorastudio.settings import Settings

HERE = Path(__file__).resolve().parent


def _body(tiny_model: Callable[[str], Path], **over: object) -> dict:
    base = {"family": "flux", "base_model": str(tiny_model("flux")), "prompt": "a red circle", "seed": 1}
    return {**base, "steps": 2, "width": 32, "height": 32, **over}


def _generation_workers(server_pid: int) -> list[psutil.Process]:
    """The server's spawned generation worker processes (not multiprocessing's resource tracker)."""
    found = []
    for child in psutil.Process(server_pid).children():
        try:
            cmdline = " ".join(child.cmdline())
        except psutil.NoSuchProcess:
            continue
        if "spawn_main" in cmdline and child.status() != psutil.STATUS_ZOMBIE:
            found.append(child)
    return found


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_a_killed_generation_worker_is_reported_and_the_server_goes_on(
    settings: Settings, tiny_model: Callable[[str], Path]
) -> None:
    body = _body(tiny_model)
    gallery = settings.home / "gallery"
    with serve_process(settings) as (proc, client):
        assert _generation_workers(proc.pid) == []  # nothing is spawned before a request
        idle_mb = _peak_rss_mb(proc.pid)
        first = client.post("/api/generate", json=body)
        assert first.status_code == 201, first.text
        image = client.get(first.json()["url"]).content
        (worker,) = _generation_workers(proc.pid)
        again = client.post("/api/generate", json=body)  # the resident pipeline: same worker, same image
        assert again.status_code == 201 and client.get(again.json()["url"]).content == image
        assert [w.pid for w in _generation_workers(proc.pid)] == [worker.pid]

        # over the budget: 400 with the reason, before any work (the worker's CPU time stands still)
        worker_cpu = sum(worker.cpu_times()[:2])
        t0 = time.monotonic()
        huge = client.post("/api/generate", json={**body, "width": 4096, "height": 4096})
        too_long = client.post("/api/generate", json={**body, "width": 1024, "height": 1024, "steps": 201})
        too_wide = client.post("/api/generate", json={**body, "width": 8192, "height": 512})
        refused_s = time.monotonic() - t0
        assert huge.status_code == 400 and "16,777,216 pixels is over the generation budget" in huge.text, (
            huge.text
        )
        assert too_long.status_code == 400 and "between 1 and 200" in too_long.text
        assert too_wide.status_code == 400 and "8192 is over the generation budget of 4096" in too_wide.text
        assert sum(worker.cpu_times()[:2]) - worker_cpu < 0.05
        assert [w.pid for w in _generation_workers(proc.pid)] == [worker.pid]

        # kill -9 of the worker in the middle of a request
        slow = {**body, "width": 512, "height": 512, "steps": 40}
        with ThreadPoolExecutor(1) as pool:
            busy_from = sum(worker.cpu_times()[:2])
            pending = pool.submit(client.post, "/api/generate", json=slow)
            wait_for(lambda: sum(worker.cpu_times()[:2]) > busy_from + 0.5, 30, "the worker to be busy", 0.02)
            assert not pending.done()
            os.kill(worker.pid, signal.SIGKILL)
            killed_at = time.monotonic()
            lost = pending.result()
            reported_s = time.monotonic() - killed_at
        assert lost.status_code == 503, lost.text
        assert lost.json()["error"] == "GenerationWorkerLost"
        assert "the generation worker was killed (SIGKILL; out of memory?)" in lost.json()["detail"]
        assert client.get("/api/info").status_code == 200  # the server goes on
        assert sorted(p.name for p in gallery.iterdir() if p.name.startswith(".")) == []  # no staging left
        assert len(list(gallery.glob("*.png"))) == 2

        after = client.post("/api/generate", json=body)  # a fresh worker, the same image
        assert after.status_code == 201, after.text
        assert client.get(after.json()["url"]).content == image
        (fresh,) = _generation_workers(proc.pid)
        assert fresh.pid != worker.pid
        server_mb = _peak_rss_mb(proc.pid)

        proc.send_signal(signal.SIGKILL)  # the worker dies with the server
        proc.wait(10)
        t0 = time.monotonic()
        wait_for(lambda: not process_alive(fresh.pid), 3, "the worker's death", poll=0.02)
        worker_gone_s = time.monotonic() - t0
    record_figure(
        "generation_worker_kill",
        {
            "kill_to_503_s": round(reported_s, 3),
            "three_over_budget_refusals_s": round(refused_s, 3),
            "server_peak_rss_idle_mb": round(idle_mb, 1),
            "server_peak_rss_after_generations_mb": round(server_mb, 1),
            "worker_gone_after_server_kill_s": round(worker_gone_s, 3),
        },
    )
    assert reported_s < 2.0


def test_out_of_memory_in_the_worker_is_a_503_and_the_next_request_gets_a_fresh_worker(
    settings: Settings, tiny_model: Callable[[str], Path]
) -> None:
    """A served app (uvicorn in this process, its generation workers forked from the suite's
    zygote: tests/zygote.py) generates an image, then one that runs into the worker's memory
    limit (RLIMIT_AS, generation_fault_workers.py): 503 "ran out of memory", the server answers,
    the next request gets a fresh worker and the first image again."""
    body = {**_body(tiny_model), "prompt": "x"}
    app = create_app(settings, generation_target=rlimited_generation_worker)
    with live_server(app) as server:
        client = server.client
        first = client.post("/api/generate", json=body)
        assert first.status_code == 201, first.text
        image = client.get(first.json()["url"]).content
        pid = app.state.generation.worker_pid
        t0 = time.monotonic()
        oom = client.post("/api/generate", json={**body, "prompt": OOM_PROMPT, "width": 1024, "height": 1024})
        oom_s = time.monotonic() - t0
        assert oom.status_code == 503 and oom.json()["error"] == "GenerationWorkerLost", oom.text
        detail = oom.json()["detail"]
        assert detail.startswith("the generation worker ran out of memory"), detail
        assert client.get("/api/info").status_code == 200
        after = client.post("/api/generate", json=body)
        assert after.status_code == 201, after.text
        assert client.get(after.json()["url"]).content == image
        assert app.state.generation.worker_pid not in (None, pid)
    record_figure("generation_worker_oom", {"detail": detail[:160], "oom_to_503_s": round(oom_s, 2)})


def test_no_pipeline_code_in_the_server(settings: Settings, tiny_model: Callable[[str], Path]) -> None:
    """In a fresh interpreter (generation_server_probe.py): a real server generates an image, then
    one whose worker runs out of memory (503 "ran out of memory", the server answers), then the
    first image again from a fresh worker; its workers are spawned processes running the real
    worker loop with a stand-in for the pipeline (the real pipeline's OOM is the test above). The
    pipeline libraries never enter the server process (torch does: the family registry's specs
    import it)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [
            sys.executable,
            str(HERE / "generation_server_probe.py"),
            str(settings.home),
            str(tiny_model("flux")),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["first"] == 201, report
    for module in ("diffusers", "transformers", "peft", "lorastudio.generate"):
        assert report["modules"][module] is False, (module, report)
        assert report["modules_at_end"][module] is False, (module, report)
    oom = report["oom"]
    assert oom["status"] == 503 and oom["error"] == "GenerationWorkerLost", report
    assert oom["detail"].startswith(f"the generation worker ran out of memory ({STAND_IN_OOM})"), report
    assert report["info_after_oom"] == 200 and report["after"] == 201 and report["same_image"], report
    assert report["fresh_worker"], report
