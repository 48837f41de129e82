"""Run by test_generation_worker.py in a fresh interpreter (so that nothing else has imported the
engine): a real server (uvicorn in a thread of this process) whose generation workers are real
spawned processes running the real worker loop with a stand-in for the pipeline
(generation_fault_workers.stand_in_generation_worker: no torch, no model; "oom" and its exit code
on OOM_PROMPT requests). It generates an image, then an image that runs out of memory, then the
first image again; prints, as one JSON line, what each answered and which engine modules this
(the server's) process had imported after the first image and at the end. What the server does
is the same for the real pipeline's replies (the real OOM: test_generation_worker's in-process
test); the stand-in spares the two workers' pipeline imports (~6 CPU s each)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ENGINE_MODULES = ("diffusers", "transformers", "peft", "lorastudio.generate", "torch")


def main(home: str, model: str) -> None:
    from generation_fault_workers import OOM_PROMPT, stand_in_generation_worker

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
    app = create_app(Settings(home=Path(home)), generation_target=stand_in_generation_worker)
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
        modules_at_end = {m: m in sys.modules for m in ENGINE_MODULES}
    report = {
        "first": first.status_code,
        "modules": modules,
        "modules_at_end": modules_at_end,
        "oom": {"status": oom.status_code, **oom.json(), "seconds": round(oom_s, 2)},
        "info_after_oom": info,
        "after": after.status_code,
        "same_image": same,
        "fresh_worker": fresh_pid not in (None, pid),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
