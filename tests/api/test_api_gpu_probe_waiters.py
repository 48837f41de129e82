"""Requests that need the GPU facts while the GPU probe runs hold no request thread: GET /api/info
(RELIABILITY 185) and the synchronous routes that reach jobs/hardware.host_info (a preflight, a
start, a caption job's placement: RELIABILITY 190, api/host_wait.py). Before, each waited in one
of the server's 40 request threads (blocked on jobs/hardware.py's one-probe lock, the probe
bounded by 60 s), so 45 of them at once left no thread for any other route (the dataset list,
the run status) until the probe answered."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.polling import until

from lorastudio.jobs import hardware
from lorastudio.settings import Settings

PROBE = r"""
import json, sys, time
from pathlib import Path
folder = Path(sys.argv[1])
(folder / "started").touch()
while not (folder / "go").exists():
    time.sleep(0.02)
print(json.dumps({"cuda": True, "devices": [{"name": "x", "total_memory": 2**30, "capability": [9, 0]}]}))
"""


@pytest.fixture
def hanging_probe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A host that may have a GPU, its probe waiting for `go` in the folder returned."""
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    monkeypatch.setattr(hardware, "cuda_impossible", lambda: False)
    monkeypatch.setattr(hardware, "PROBE_COMMAND", [sys.executable, str(script), str(tmp_path)])
    monkeypatch.setattr(hardware, "_answers", {})
    monkeypatch.setattr(hardware, "_here", False)
    monkeypatch.setattr(hardware, "PROBE_TIMEOUT_S", 600.0)  # only `go` ends it (not its bound)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return tmp_path


def test_requests_waiting_for_the_probe_leave_the_other_routes_free(
    client: TestClient, hanging_probe: Path
) -> None:
    answers: list[int] = []
    infos = [
        threading.Thread(target=lambda: answers.append(client.get("/api/info").status_code), daemon=True)
        for _ in range(45)
    ]
    for thread in infos:
        thread.start()
    try:
        until(lambda: (hanging_probe / "started").exists(), 60, "the probe's start")
        listed: list[int] = []
        threading.Thread(
            target=lambda: listed.append(client.get("/api/datasets").status_code), daemon=True
        ).start()
        until(lambda: listed, 60, "the dataset list while 45 requests wait for the probe")
        assert listed == [200] and answers == []  # the probe still runs
    finally:
        (hanging_probe / "go").touch()
    until(lambda: len(answers) == 45, 120, "the 45 answers")
    assert set(answers) == {200}
    host = client.get("/api/info").json()["host"]
    assert (host["device"], host["name"]) == ("cuda", "x")


def test_routes_that_need_the_gpu_facts_wait_for_the_probe_without_a_request_thread(
    client: TestClient, settings: Settings, hanging_probe: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (settings.datasets_dir / "d").mkdir(parents=True)
    asks = [0]  # how often host_info / known_host_info asked whether a probe is needed
    counting = threading.Lock()  # the old code asks from request threads

    def counted() -> bool:
        with counting:
            asks[0] += 1
        return False

    monkeypatch.setattr(hardware, "cuda_impossible", counted)
    probes_before = hardware.probes
    requests = [
        ("/api/train/preflight", {"config": {}}),
        ("/api/train/start", {"config": {}}),
        ("/api/datasets/d/caption", {"model": "no-such-captioner"}),
    ] * 16
    answers: list[int] = []
    waiting = [
        threading.Thread(
            target=lambda u=u, b=b: answers.append(client.post(u, json=b).status_code), daemon=True
        )
        for u, b in requests
    ]
    for thread in waiting:
        thread.start()
    try:
        # all 48 have asked: before, only the 40 that held a request thread could
        until(lambda: asks[0] >= len(requests), 60, "the 48 requests waiting for the probe")
        got: dict[str, int] = {}
        for path in ("/api/datasets", "/api/train/status"):
            threading.Thread(
                target=lambda p=path: got.__setitem__(p, client.get(p).status_code), daemon=True
            ).start()
        until(lambda: len(got) == 2, 60, "the dataset list and the run status during the probe")
        assert got == {"/api/datasets": 200, "/api/train/status": 200}
        assert answers == [] and not (hanging_probe / "go").exists()  # the probe still runs
    finally:
        (hanging_probe / "go").touch()
    until(lambda: len(answers) == len(requests), 120, "the 48 answers")
    assert set(answers) <= {400, 404}, answers  # each refused in words (an empty config, no such model)
    assert hardware.probes == probes_before + 1  # one probe, its answer shared
