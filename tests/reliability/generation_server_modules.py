"""Run by test_generation_worker.py in a fresh interpreter: a real server (uvicorn in a thread of
this process) generates one image with the tiny FLUX.1 model; prints, as one JSON line, the
status and which engine modules this (the server's) process has imported since."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ENGINE_MODULES = ("diffusers", "transformers", "peft", "lorastudio.generate", "torch")


def main(home: str, model: str) -> None:
    from live_server import live_server
    from lorastudio.api.app import create_app
    from lorastudio.settings import Settings

    body = {"family": "flux", "base_model": model, "prompt": "x", "steps": 1, "width": 32, "height": 32}
    with live_server(create_app(Settings(home=Path(home)))) as server:
        before = {m: m in sys.modules for m in ENGINE_MODULES}
        answer = server.client.post("/api/generate", json=body)
        after = {m: m in sys.modules for m in ENGINE_MODULES}
    print(json.dumps({"status": answer.status_code, "before": before, "after": after}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
