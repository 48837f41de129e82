"""Which requests make the server process import torch (RELIABILITY.md, "Known problems").

A fresh interpreter serves the app in process and reports `sys.modules` after each request: the
listing routes, the config checks (preflight, a start refused or accepted: the training worker is
a process of its own, a resume) and the generation's validation and the models list, which look
families up (families/ specs are torch-free: their hooks import torch where they run), stay
torch-free, and none imports diffusers, transformers or peft. `GET /api/info` and the config
checks ask for the GPU in a child process (jobs/hardware.host_info, jobs/gpu_probe.py) on a host
that may have one, and ask nobody on one without an NVIDIA or ROCm driver.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from lorastudio.settings import Settings

PROBE = r"""
import json, sys, time
exec(sys.argv[2])  # the test's setup
from fastapi.testclient import TestClient
from lorastudio.api.app import create_app
from lorastudio.settings import get_settings

HEAVY = ("torch", "diffusers", "transformers", "peft")
with TestClient(create_app(get_settings()), base_url="http://127.0.0.1") as client:
    seen = []
    for method, path, body in json.loads(sys.argv[1]):
        if method == "WAIT":  # until the job service is idle (a job ran in its worker)
            deadline = time.monotonic() + 180
            while client.get("/api/train/status").json()["busy"]:
                assert time.monotonic() < deadline, "the job did not end"
                time.sleep(0.2)
            continue
        if "{run}" in path:  # the newest run's id
            path = path.replace("{run}", client.get("/api/runs").json()["runs"][0]["id"])
        answer = client.request(method, path.removesuffix("#body"), json=body)
        seen.append([answer.status_code, [m for m in HEAVY if m in sys.modules]])
        if path.endswith("#body"):
            seen[-1].append(answer.json())
print(json.dumps(seen))
"""


def _probe(home: Path, requests: list[tuple[str, str, dict | None]], setup: str = "") -> list[list]:
    """[status, the heavy modules imported so far] of each request but the WAITs, in order;
    `setup`: code run before the app is made. A request whose path ends with "#body" gives its
    answer's JSON as a third item."""
    env = {**os.environ, "LORASTUDIO_HOME": str(home)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(requests), setup],
        env=env,
        capture_output=True,
        text=True,
        timeout=540,  # under pytest-timeout's 600 s: a loaded host (a guard, not a bound tested)
    )
    assert out.returncode == 0, out.stderr[-2000:]
    print(out.stderr[-4000:])  # pytest shows it when the test fails (a check's child that ran out of time)
    return json.loads(out.stdout.splitlines()[-1])


def test_listing_routes_do_not_import_torch_and_the_gpu_probe_only_where_a_gpu_may_be(
    settings: Settings, sample_dataset: Path
):
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
    assert seen[:-1] == [[200, []]] * len(listing), seen
    assert seen[-1] == [200, []]


# A GPU host as the server sees it: the driver check says a GPU may be there, and the GPU probe's
# child (PROBE_COMMAND) is a script printing what jobs/gpu_probe prints on a host of two A100s.
GPU_HOST = r"""
import sys
from lorastudio.jobs import hardware
hardware.cuda_impossible = lambda: False
hardware.PROBE_COMMAND = [sys.executable, "-c", {fake!r}]
"""
FAKE_PROBE = r"""
import json, os
with open({starts!r}, "a") as f:
    f.write("probe\n")
a100 = {{"name": "NVIDIA A100-SXM4-40GB", "total_memory": 42_505_207_808, "capability": [8, 0]}}
print(json.dumps({{"cuda": True, "devices": [a100, a100], "visible": None, "torch": "2.9.0", "cuda_version": "12.8"}}))
"""


def test_the_gpu_probe_of_a_gpu_host_runs_in_a_child(
    settings: Settings, sample_dataset: Path, tiny_model: Callable[[str], Path], tmp_path: Path
):
    """Before: on a host with the NVIDIA driver GET /api/info and the config checks imported torch
    into the server. Now the answer is the child's, asked once for every request."""
    settings.ensure_dirs()
    shutil.copytree(sample_dataset, settings.datasets_dir / "shapes")
    shutil.copytree(tiny_model("flux"), settings.models_dir / "tiny-flux")
    starts = tmp_path / "probe_starts"
    setup = GPU_HOST.format(fake=FAKE_PROBE.format(starts=str(starts)))
    config = {"family": "flux", "base_model": "tiny-flux", "data_dir": "shapes", "resolution": 32}
    fp16 = {**config, "steps": 3, "output_name": "r", "base_precision": "fp16", "lora_rank": 2}
    seen = _probe(
        settings.home,
        [
            ("GET", "/api/info#body", None),
            ("POST", "/api/train/preflight#body", {"config": fp16}),  # fp16: a GPU's precision
            ("POST", "/api/train/preflight", {"config": {**fp16, "base_precision": "fp8"}}),  # 8.0: no fp8
        ],
        setup,
    )
    assert [status for status, *_ in seen] == [200, 200, 400], seen
    assert all(heavy == [] for _, heavy, *_ in seen), seen
    host = seen[0][2]["host"]
    assert (host["device"], host["name"], host["memory_gb"], host["gpu_count"]) == (
        "cuda",
        "NVIDIA A100-SXM4-40GB",
        39.6,
        2,
    )
    assert "bf16" in host["precisions"] and "fp8" not in host["precisions"]
    assert starts.read_text() == "probe\n"  # one child for the three requests


# The server's training workers forked from a zygote of the probe's own (tests/zygote.py, as the
# suite's workers are): a fresh interpreter's pair of spawned workers imported torch, diffusers and
# peft twice (~7 CPU s each); the zygote imports them once, outside the server, as a spawned
# worker does (the server's sys.modules are the probe's; the zygote is another process).
ZYGOTE_SETUP = f"""
import multiprocessing, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
import zygote
from lorastudio import processes

class _ZygoteMultiprocessing:
    def get_context(self, method=None):
        return zygote.ZygoteContext() if method == "spawn" else multiprocessing.get_context(method)

processes.mp = _ZygoteMultiprocessing()
"""


def test_family_lookups_do_not_import_torch_in_the_server(
    settings: Settings, sample_dataset: Path, tiny_model: Callable[[str], Path]
):
    """Before: the first request that looked a family up imported torch (families/<family>.py did
    at its top): the preflight, a start, a resume, a generation's validation, the models list.
    The preflight's caption count (the `tokenizers` package) and its lora_targets check (a child
    process: jobs/target_check.py) keep the server torch-free too."""
    settings.ensure_dirs()
    shutil.copytree(sample_dataset, settings.datasets_dir / "shapes")
    shutil.copytree(tiny_model("flux"), settings.models_dir / "tiny-flux")  # recognised by GET /api/models
    config = {"family": "flux", "base_model": "tiny-flux", "data_dir": "shapes", "resolution": 32}
    good = {**config, "steps": 3, "save_every": 2, "output_name": "r", "lora_rank": 2}
    bad = {**config, "lora_rank": 0, "num_gpus": 2, "report_to": ["wandb"], "bogus": 1}
    generate = {"family": "flux", "base_model": "tiny-flux", "prompt": "x", "width": 64, "height": 64}
    requests = [
        ("GET", "/api/models", None),
        ("POST", "/api/train/preflight", {"config": bad}),
        ("POST", "/api/train/preflight", {"config": good}),  # its captions counted with tokenizers
        (
            "POST",
            "/api/train/preflight",
            {"config": {**good, "lora_targets": ["no_such_layer"]}},
        ),  # a child checks
        ("POST", "/api/train/start", {"config": bad}),
        ("POST", "/api/generate", {**generate, "steps": 10_000}),  # over the budget: refused
        ("POST", "/api/generate", {**generate, "family": "sdxl"}),  # not an SDXL pipeline: refused
        ("POST", "/api/train/start", {"config": good}),
        ("WAIT", "", None),
        ("POST", "/api/runs/{run}/resume", {"settings": {"steps": 4, "learning_rate": 1.0}}),  # refused
        ("POST", "/api/runs/{run}/resume", {"settings": {"steps": 4}}),
        ("WAIT", "", None),
    ]
    # the lora_targets check's child imports torch and diffusers: measured past its 120 s bound on
    # a 2-core host at load 10 (its preflight then leaves the check to the start: 200, not the
    # 400 asserted); that bound is target_check's own test's subject, not this one's
    setup = ZYGOTE_SETUP + "from lorastudio.jobs import target_check\ntarget_check.TIMEOUT_S = 400.0\n"
    seen = _probe(settings.home, requests, setup)
    statuses = [status for status, _ in seen]
    assert statuses == [200, 400, 200, 400, 400, 400, 400, 201, 400, 201], seen
    assert all(heavy == [] for _, heavy in seen), seen


def test_every_family_module_and_its_spec_are_torch_free() -> None:
    """The registry's every family (spec, recognition of a model folder, the config rules served
    to the web form) reads without torch: a hook imports it where it runs."""
    code = (
        "import sys\n"
        "from lorastudio import families\n"
        "from lorastudio.config_resolve import refused_fields\n"
        "for family in families.all_families():\n"
        "    assert family.spec.accepted_pipelines and family.spec.defaults is not None\n"
        "    refused_fields(family.spec.supports)\n"
        "print(sorted(m for m in ('torch', 'diffusers', 'transformers', 'peft') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
