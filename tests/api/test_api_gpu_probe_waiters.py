"""GET /api/info while the GPU probe runs (RELIABILITY 185): the requests waiting for its answer
hold no request thread. Before, each waited in one of the server's 40 request threads (blocked on
jobs/hardware.py's one-probe lock, the probe bounded by 60 s), so 45 of them at once left no
thread for any other route (the dataset list, the run status) until the probe answered."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.polling import until

from lorastudio.jobs import hardware

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
