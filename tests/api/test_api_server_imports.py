"""Which requests make the server process import torch (RELIABILITY.md, "Known problems").

A fresh interpreter serves the app in process and reports `sys.modules` after each request: the
listing routes stay torch-free, `GET /api/info` (the GPU probe) imports torch, and none imports
diffusers, transformers or peft. (A config check imports torch too: families/<family>.py does at
its top.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from lorastudio.settings import Settings

PROBE = r"""
import json, sys
from fastapi.testclient import TestClient
from lorastudio.api.app import create_app
from lorastudio.settings import get_settings

HEAVY = ("torch", "diffusers", "transformers", "peft")
with TestClient(create_app(get_settings()), base_url="http://127.0.0.1") as client:
    seen = {}
    for method, path, body in json.loads(sys.argv[1]):
        status = client.request(method, path, json=body).status_code
        seen[f"{method} {path}"] = [status, [m for m in HEAVY if m in sys.modules]]
print(json.dumps(seen))
"""


def _probe(home: Path, requests: list[tuple[str, str, dict | None]]) -> dict[str, list]:
    env = {**os.environ, "LORASTUDIO_HOME": str(home)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(requests)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_listing_routes_do_not_import_torch_and_the_gpu_probe_does(settings: Settings, sample_dataset: Path):
    settings.ensure_dirs()
    shutil.copytree(sample_dataset, settings.datasets_dir / "shapes")
    listing = [
        ("GET", "/api/runs", None),
        ("GET", "/api/datasets", None),
        ("GET", "/api/datasets/shapes", None),
        ("GET", "/api/loras", None),
        ("GET", "/api/gallery", None),
        ("GET", "/api/train/status", None),
        ("GET", "/api/cache", None),
        ("GET", "/api/models", None),  # models/ is empty: nothing to recognise
        ("GET", "/docs", None),
        ("GET", "/openapi.json", None),
    ]
    seen = _probe(settings.home, [*listing, ("GET", "/api/info", None)])  # one interpreter, in this order
    for method, path, _ in listing:
        assert seen[f"{method} {path}"] == [200, []], (path, seen)
    assert seen["GET /api/info"] == [200, ["torch"]]
