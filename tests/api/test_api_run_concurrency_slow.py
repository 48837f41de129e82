"""Many clients on one studio's runs at once (session 39 concur), on a real uvicorn server with
real training workers (tiny FLUX.1, CPU): starts with and without queueing on a few output names
and defaulted ones, stops asking both ways, run deletes with and without keep_files, resumes,
reads of a run's record, checkpoints, LoRAs and samples, the LoRA list, cache clears and prunes,
dataset renames, from 5 threads for CHAOS_S seconds; and status polls from 3 threads while one run
starts and ends. Every answer is a success or a clear 4xx (never a 5xx); each job's status never
goes back (queued, preparing, running, stopping, then final) nor its step; no run is live at the
end and every completed run's folder is there. The default suite forces each interleaving in its
own test (RELIABILITY 1920-1923 and those before); this is the loop."""

from __future__ import annotations

import itertools
import os
import random
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_helpers import FINAL, LiveServer, wait_status

from lorastudio.settings import Settings

CHAOS_S = float(os.environ.get("CHAOS_S", "60"))
LIVE = ["queued", "preparing", "running", "stopping"]
CLEAR = {200, 201, 400, 404, 409}


def _rank(status: str) -> int:
    return LIVE.index(status) if status in LIVE else len(LIVE)


def _monotone(seen: dict[str, list[tuple[str, int]]]) -> list[str]:
    """Jobs whose status went back or whose step went backwards between two polls."""
    bad = []
    for job, polls in seen.items():
        ranks, steps = [_rank(s) for s, _ in polls], [step for _, step in polls]
        if any(b < a for a, b in itertools.pairwise(ranks)) or any(
            b < a for a, b in itertools.pairwise(steps)
        ):
            bad.append(f"{job}: {polls}")
    return bad


def _poll(client: httpx.Client, seen: dict[str, list[tuple[str, int]]], bad: list[str]) -> None:
    """One status poll: its job's (status, step) noted in `seen`, a half-told state in `bad`."""
    job = client.get("/api/train/status").json()["job"]
    if job is None:
        return
    seen.setdefault(job["id"], []).append((job["status"], (job["progress"] or {}).get("step", 0)))
    if job["status"] in ("preparing", "running") and (job["pid"] is None or job["started_at"] is None):
        bad.append(f"{job['status']} without a pid: {job['id']}")
    if job["status"] in FINAL and job["finished_at"] is None:
        bad.append(f"{job['status']} without finished_at: {job['id']}")


@pytest.mark.slow  # ~55 s on 2 loaded cores (real workers): the status polls while one run goes by
def test_status_polls_while_a_run_starts_and_ends_never_go_back(
    server: LiveServer, settings: Settings, flux_config: Callable[..., dict], sample_dataset: Path
) -> None:
    settings.ensure_dirs()
    shutil.copytree(sample_dataset, settings.datasets_dir / "shapes")
    barrier, answers = threading.Barrier(2), []

    def start(i: int) -> None:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            barrier.wait()
            body = {"config": flux_config(steps=12, output_name=f"r{i}"), "queue": False}
            answers.append(client.post("/api/train/start", json=body))

    starts = [threading.Thread(target=start, args=(i,)) for i in range(2)]
    for thread in starts:
        thread.start()
    for thread in starts:
        thread.join()
    assert sorted(a.status_code for a in answers) == [201, 409], [a.text for a in answers]
    job = next(a for a in answers if a.status_code == 201).json()["id"]
    seen_by: list[dict[str, list[tuple[str, int]]]] = [{}, {}, {}]  # each poller's, in its order
    bad: list[str] = []
    done = threading.Event()

    def poll(seen: dict[str, list[tuple[str, int]]]) -> None:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            while not done.is_set():
                _poll(client, seen, bad)

    pollers = [threading.Thread(target=poll, args=(seen,)) for seen in seen_by]
    for thread in pollers:
        thread.start()
    try:
        assert wait_status(server.client, job, FINAL, timeout=180)["status"] == "completed"
    finally:
        done.set()
        for thread in pollers:
            thread.join()
    assert [r["id"] for r in server.client.get("/api/runs").json()["runs"]] == [job]
    assert not bad + [m for seen in seen_by for m in _monotone(seen)]


@pytest.mark.slow  # ~2 min at CHAOS_S=40: 5 clients for CHAOS_S (60) s, then the runs end
def test_many_clients_on_runs_at_once_leave_a_consistent_studio(
    server: LiveServer, settings: Settings, flux_config: Callable[..., dict], sample_dataset: Path
) -> None:
    settings.ensure_dirs()
    shutil.copytree(sample_dataset, settings.datasets_dir / "shapes")
    until = time.monotonic() + CHAOS_S
    runs: set[str] = set()
    seen_by: dict[int, dict[str, list[tuple[str, int]]]] = {}
    bad: list[str] = []
    lock = threading.Lock()

    def act(client: httpx.Client, rnd: random.Random) -> httpx.Response | None:
        op = rnd.choice(["start", "start", "stop", "poll", "delete", "resume", "read", "other"])
        with lock:
            known = sorted(runs)
        if op == "start":
            over: dict[str, Any] = {"steps": rnd.choice([2, 4, 8]), "save_every": 2}
            if rnd.random() < 0.7:
                over["output_name"] = rnd.choice(["a", "b", "c"])
            answer = client.post(
                "/api/train/start", json={"config": flux_config(**over), "queue": rnd.random() < 0.7}
            )
        elif op == "stop":
            answer = client.post("/api/train/stop", json={"save": rnd.random() < 0.6})
        elif op == "poll":  # one client's polls, in order: seen per thread, merged at the end
            _poll(client, seen_by[threading.get_ident()], bad)
            return None
        elif op in ("delete", "resume", "read") and known:
            run = rnd.choice(known)
            if op == "delete":
                answer = client.delete(f"/api/runs/{run}", params={"keep_files": rnd.random() < 0.2})
            elif op == "resume":
                answer = client.post(f"/api/runs/{run}/resume", json={"queue": rnd.random() < 0.7})
            else:
                answer = client.get(
                    f"/api/runs/{run}{rnd.choice(['', '/checkpoints', '/loras', '/samples'])}"
                )
        else:
            answer = rnd.choice([
                lambda: client.get("/api/loras"),
                lambda: client.delete("/api/cache"),
                lambda: client.post("/api/cache/prune", params={"max_gb": 0}),
                lambda: client.post(f"/api/datasets/{rnd.choice(['shapes', 'shapes2'])}/rename",
                                    json={"to": rnd.choice(['shapes', 'shapes2'])}),
            ])()  # fmt: skip
        if answer.status_code == 201 and op in ("start", "resume"):
            with lock:
                runs.add(answer.json()["id"])
        return answer

    def client_loop(seed: int) -> None:
        rnd = random.Random(seed)
        seen_by[threading.get_ident()] = {}
        with httpx.Client(base_url=server.url, timeout=120) as client:
            while time.monotonic() < until:
                answer = act(client, rnd)
                if answer is not None and answer.status_code not in CLEAR:
                    with lock:
                        bad.append(
                            f"{answer.request.method} {answer.request.url.path}: {answer.status_code} {answer.text[:300]}"
                        )

    clients = [threading.Thread(target=client_loop, args=(i,)) for i in range(5)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    deadline = time.monotonic() + 180
    while server.client.get("/api/train/status").json()["busy"]:
        assert time.monotonic() < deadline, "a run still live 180 s after the clients stopped"
        server.client.post("/api/train/stop", json={"save": True})
        time.sleep(0.5)
    listed = server.client.get("/api/runs", params={"limit": 200}).json()["runs"]
    assert not [r["id"] for r in listed if r["status"] not in FINAL]
    folders = {p.name for p in settings.outputs_dir.iterdir()}
    assert not [r["id"] for r in listed if r["status"] == "completed" and r["output_name"] not in folders]
    assert not bad + [m for seen in seen_by.values() for m in _monotone(seen)]
