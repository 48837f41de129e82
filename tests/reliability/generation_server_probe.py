"""Run by test_generation_worker.py in a fresh interpreter (so that nothing else has imported the
engine): a real server (uvicorn in a thread of this process) whose generation worker runs into a
memory limit on OOM_PROMPT requests (generation_fault_workers.py). It generates an image, then an
image that runs out of memory, then the first image again; prints, as one JSON line, what each
answered and which engine modules this (the server's) process imported."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ENGINE_MODULES = ("diffusers", "transformers", "peft", "lorastudio.generate", "torch")


def main(home: str, model: str) -> None:
    from generation_fault_workers import OOM_PROMPT, rlimited_generation_worker

    from live_server import live_server
    from lorastudio.api.app import create_app
    from lorastudio.settings import Settings

    body = {
        "family": "flux",
        "base_model": model,
        "prompt": "x",
        "seed": 1,
        "steps": 2,
        "width": 32,
        "height": 32,
    }
    app = create_app(Settings(home=Path(home)), generation_target=rlimited_generation_worker)
    with live_server(app) as server:
        client = server.client
        first = client.post("/api/generate", json=body)
        image = client.get(first.json()["url"]).content if first.status_code == 201 else b""
        modules = {m: m in sys.modules for m in ENGINE_MODULES}
        pid = app.state.generation.worker_pid
        t0 = time.monotonic()
        oom = client.post("/api/generate", json={**body, "prompt": OOM_PROMPT, "width": 1024, "height": 1024})
        oom_s = time.monotonic() - t0
        info = client.get("/api/info").status_code
        after = client.post("/api/generate", json=body)
        same = after.status_code == 201 and client.get(after.json()["url"]).content == image
        fresh_pid = app.state.generation.worker_pid
    report = {
        "first": first.status_code,
        "modules": modules,
        "oom": {"status": oom.status_code, **oom.json(), "seconds": round(oom_s, 2)},
        "info_after_oom": info,
        "after": after.status_code,
        "same_image": same,
        "fresh_worker": fresh_pid not in (None, pid),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
