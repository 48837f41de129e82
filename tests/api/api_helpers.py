"""Helpers of the API tests: a real uvicorn server in a thread, uploads, waiting for jobs and
reading the event stream."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import httpx
from PIL import Image

from live_server import LiveServer, live_server  # noqa: F401 (re-exported for the tests)
from zygote import ANSWER_S


def upload_folder(client: httpx.Client | object, name: str, folder: Path) -> httpx.Response:
    """POST every file of `folder` to /api/datasets/<name>/files as one multipart upload."""
    files = [("files", (p.name, p.read_bytes())) for p in sorted(folder.iterdir()) if p.is_file()]
    return client.post(f"/api/datasets/{name}/files", files=files)  # type: ignore[attr-defined]


FINAL = {"completed", "stopped", "cancelled", "failed", "interrupted"}


def upload_images(client: httpx.Client | object, name: str, count: int, caption: str | None = None) -> None:
    """Upload `count` 32 x 32 PNGs with .txt captions to dataset `name` (caption: the same text for
    each, default "`name` i"); asserts 201."""
    files = []
    for i in range(count):
        buf = io.BytesIO()
        Image.new("RGB", (32, 32), (30 * i, 90, 200)).save(buf, format="PNG")
        text = caption if caption is not None else f"{name} {i}"
        files += [("files", (f"{name}{i}.png", buf.getvalue())), ("files", (f"{name}{i}.txt", text.encode()))]
    assert client.post(f"/api/datasets/{name}/files", files=files).status_code == 201  # type: ignore[attr-defined]


def wait_status(client: httpx.Client, job_id: str, statuses: set[str], timeout: float = 90) -> dict:
    """The status of `job_id` once it is one of `statuses`, `timeout` s after its worker started
    at the most: the wait for that start (while the status names it queued) is bounded apart, by
    the zygote's (the first worker of a test process waits for its imports, tests/zygote.py; a
    90-s bound over both failed "still queued" on a host at load 15, RELIABILITY 1482)."""
    start_by = time.monotonic() + ANSWER_S
    while "queued" not in statuses:
        job = client.get("/api/train/status").json()["job"]
        if not (job and job["id"] == job_id and job["status"] == "queued"):
            break
        assert time.monotonic() < start_by, f"job {job_id} still queued after {ANSWER_S:.0f}s"
        time.sleep(0.05)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get("/api/train/status").json()["job"]
        if job and job["id"] == job_id and job["status"] in statuses:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} not in {statuses} after {timeout}s: {job}")


def wait_idle(client: httpx.Client, timeout: float = 10) -> None:
    """Wait until the worker has exited and the GPU is free."""
    deadline = time.monotonic() + timeout
    while client.get("/api/train/status").json()["busy"]:
        assert time.monotonic() < deadline, "the GPU was not freed"
        time.sleep(0.02)


def stop_after_first_step(client: httpx.Client, run: str, timeout: float = 120) -> None:
    """Wait for run `run`'s first step (`timeout` s at the most), stop it with save and wait until
    it reads stopped and the worker has exited: a checkpoint to resume from."""
    deadline = time.monotonic() + timeout
    while ((client.get("/api/train/status").json()["job"] or {}).get("progress") or {}).get("step", 0) < 1:
        assert time.monotonic() < deadline, "the tiny run took no step"
        time.sleep(0.05)
    assert client.post("/api/train/stop", json={"save": True}).status_code == 200
    assert wait_status(client, run, FINAL)["status"] == "stopped"
    wait_idle(client)


def read_events(client: httpx.Client, job_id: str, timeout: float = 90) -> list[dict]:
    """SSE events of `job_id` from the start of the log until its terminal event."""
    events: list[dict] = []
    with client.stream("GET", "/api/train/events", params={"after": 0}, timeout=timeout) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])  # strict JSON: json.loads would accept NaN, so check below
            assert "NaN" not in line and "Infinity" not in line
            if event["job_id"] == job_id:
                events.append(event)
                if event["type"] in ("complete", "error"):
                    return events
    raise AssertionError("event stream ended early")
