"""jobs/hardware.host_info on a host that may have a GPU: torch is asked in a short child
(jobs/gpu_probe.py), bounded, one at a time, cached per CUDA_VISIBLE_DEVICES; a child that fails,
hangs or answers nonsense gives "GPU facts unknown: <why>" on the no-GPU path.

The host is made to look like a GPU host (`cuda_impossible` answers False) and PROBE_COMMAND runs
a fake probe script printing what a probe on such a host prints; the real child runs once, on
this host as it is.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from tests.polling import until

from lorastudio.jobs import hardware
from lorastudio.jobs.hardware import CPU_HOST, HostInfo, host_info, precisions_for

# A probe on a host of two GPUs (an H100 and an RTX 4090), as CUDA_VISIBLE_DEVICES selects them;
# it notes each start (a line in STARTS) and the secret it was handed, and waits for GO if set.
FAKE = r"""
import json, os, sys, time
from pathlib import Path
folder = Path(sys.argv[1])
with open(folder / "starts", "a") as f:
    f.write(f"{os.getpid()} {os.environ.get('LORASTUDIO_API_TOKEN')}\n")
while (folder / "wait").exists() and not (folder / "go").exists():
    time.sleep(0.02)
gpus = [
    {"name": "NVIDIA H100 80GB HBM3", "total_memory": 85_031_714_816, "capability": [9, 0]},
    {"name": "NVIDIA GeForce RTX 4090", "total_memory": 25_393_692_672, "capability": [8, 9]},
]
visible = os.environ.get("CUDA_VISIBLE_DEVICES")
seen = gpus if visible is None else [gpus[int(i)] for i in visible.split(",") if i]
print("a library's banner")
print(json.dumps({"cuda": bool(seen), "devices": seen, "visible": visible, "torch": "2.9.0", "cuda_version": "12.8"}))
"""


@pytest.fixture
def gpu_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A host that may have a GPU, probed by FAKE (its folder returned); nothing cached."""
    script = tmp_path / "fake_probe.py"
    script.write_text(FAKE)
    monkeypatch.setattr(hardware, "cuda_impossible", lambda: False)
    monkeypatch.setattr(hardware, "PROBE_COMMAND", [sys.executable, str(script), str(tmp_path)])
    monkeypatch.setattr(hardware, "_answers", {})
    monkeypatch.setattr(hardware, "_here", False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return tmp_path


def _starts(folder: Path) -> list[str]:
    path = folder / "starts"
    return path.read_text().splitlines() if path.exists() else []


def test_the_answer_is_the_childs_and_is_cached_per_visible_devices(
    gpu_host: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("LORASTUDIO_API_TOKEN", "s3cret")
    caplog.set_level(logging.INFO, "lorastudio.jobs")
    both = HostInfo(
        "cuda",
        "NVIDIA H100 80GB HBM3",
        79.2,
        precisions_for("cuda", (9, 0)),
        gpu_count=2,
        gpu_memory_gb=(79.2, 23.6),
    )
    assert host_info() == both
    assert "fp8" in both.precisions and "bf16" in both.precisions
    assert host_info() == both  # cached: no second child
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("GPU probe")]
    assert (
        len(logged) == 1
        and "2 GPU(s), GPU 0 NVIDIA H100 80GB HBM3 (79.2 GiB) (torch 2.9.0, CUDA 12.8)" in logged[0]
    )
    assert [line.split()[1] for line in _starts(gpu_host)] == ["None"]  # without the server's secret

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # another answer for another selection
    assert host_info() == HostInfo(
        "cuda",
        "NVIDIA GeForce RTX 4090",
        23.6,
        precisions_for("cuda", (8, 9)),
        gpu_count=1,
        gpu_memory_gb=(23.6,),
    )
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # none visible: the child saw no GPU
    assert host_info() == CPU_HOST
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert host_info() == both
    assert len(_starts(gpu_host)) == 3


def test_a_hanging_child_is_killed_at_the_timeout_and_the_answer_is_unknown(
    gpu_host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (gpu_host / "wait").touch()  # the fake waits for a "go" that never comes
    monkeypatch.setattr(hardware, "PROBE_TIMEOUT_S", 1.0)
    host = host_info()
    assert host.device == "cpu" and host.gpu_count == 0 and host.precisions == precisions_for("cpu")
    assert host.name == "GPU facts unknown: the GPU probe (torch, in a child process) gave no answer in 1 s"
    (pid,) = [int(line.split()[0]) for line in _starts(gpu_host)]
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(pid, 0)
    assert host_info() == host and len(_starts(gpu_host)) == 1  # not asked again at once

    (gpu_host / "go").touch()
    later = SimpleNamespace(monotonic=lambda: time.monotonic() + hardware.RETRY_S)
    monkeypatch.setattr(hardware, "time", later)  # asked again by the first request after RETRY_S
    assert host_info().device == "cuda"
    assert len(_starts(gpu_host)) == 2


@pytest.mark.parametrize(
    ("script", "why"),
    [
        (
            "import sys; print('ImportError: No module named torch', file=sys.stderr); sys.exit(1)",
            "the GPU probe failed (exit code 1: ImportError: No module named torch)",
        ),
        ("print('no JSON here')", "the GPU probe's answer is not a JSON object: 'no JSON here'"),
        ("print('[1, 2]')", "the GPU probe's answer is not a JSON object: '[1, 2]'"),
        (
            'print(\'{"cuda": true, "devices": [{"name": "x", "total_memory": "80GB", "capability": [9, 0]}]}\')',
            "the GPU probe's answer is not understood (TypeError: device ",
        ),
        (
            'print(\'{"cuda": true, "devices": [{"name": "x", "total_memory": 1}]}\')',
            "the GPU probe's answer is not understood (KeyError: 'capability')",
        ),
        ("print('{\"devices\": []}')", "the GPU probe's answer is not understood (KeyError: 'cuda')"),
    ],
)
def test_a_failed_probe_claims_no_gpu_and_says_why(
    gpu_host: Path, monkeypatch: pytest.MonkeyPatch, script: str, why: str
) -> None:
    monkeypatch.setattr(hardware, "PROBE_COMMAND", [sys.executable, "-c", script])
    host = host_info()
    assert (host.device, host.memory_gb, host.gpu_count, host.gpu_memory_gb) == ("cpu", None, 0, ())
    assert host.name.startswith(f"GPU facts unknown: {why}"), host.name
    assert host.precisions == precisions_for("cpu")


def test_concurrent_requests_share_one_probe(gpu_host: Path) -> None:
    (gpu_host / "wait").touch()  # the child waits for "go": the requests overlap it
    start = threading.Barrier(8)
    answers: list[HostInfo] = []

    def request() -> None:
        start.wait()
        answers.append(host_info())

    threads = [threading.Thread(target=request) for _ in range(8)]
    for thread in threads:
        thread.start()
    until(lambda: _starts(gpu_host), 60, "probe start")
    probes_before = hardware.probes
    (gpu_host / "go").touch()
    for thread in threads:
        thread.join(60)
    assert len(_starts(gpu_host)) == 1 and hardware.probes == probes_before
    assert len(answers) == 8 and {a.name for a in answers} == {"NVIDIA H100 80GB HBM3"}


def test_a_process_that_trains_asks_its_own_torch(gpu_host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's train (probe_in_this_process): no child; this host's torch sees no GPU."""
    monkeypatch.setattr(hardware, "PROBE_COMMAND", [sys.executable, "-c", "raise SystemExit(3)"])
    hardware.probe_in_this_process()
    assert host_info() == CPU_HOST
    assert _starts(gpu_host) == []


def test_the_real_probe_prints_torchs_view_of_this_host() -> None:
    """`python -m lorastudio.jobs.gpu_probe` as host_info runs it, on this host as it is."""
    import torch

    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0"}
    done = subprocess.run(
        hardware.PROBE_COMMAND, capture_output=True, text=True, timeout=300, env=env, check=True
    )
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["visible"] == "0" and facts["torch"] == str(torch.__version__)
    assert facts["cuda_version"] == torch.version.cuda
    assert facts["cuda"] == torch.cuda.is_available()
    assert len(facts["devices"]) == (torch.cuda.device_count() if facts["cuda"] else 0)
    assert hardware.host_from_facts(facts).device == ("cuda" if facts["devices"] else "cpu")


ANSWER = '{"cuda": true, "devices": [{"name": "x", "total_memory": 1073741824, "capability": [9, 0]}]}'


@pytest.mark.parametrize(
    "script",
    [
        # a banner in Latin-1 before the answer: before, the UTF-8 decode of the whole output failed
        f"import sys; sys.stdout.buffer.write(b'caf\\xe9 \\xff\\n'); print({ANSWER!r})",
        # 40 MB on each stream, then the answer: before, all of it was held in the server's memory
        "import sys\nfor _ in range(40):\n    sys.stdout.write('x' * 1048575 + '\\n'); sys.stderr.write('y' * 1048576)\n"
        f"print({ANSWER!r})",
    ],
    ids=["not UTF-8", "40 MB"],
)
def test_junk_or_endless_output_before_the_answer_is_read_in_bounded_memory(
    gpu_host: Path, monkeypatch: pytest.MonkeyPatch, script: str
) -> None:
    import tracemalloc

    monkeypatch.setattr(hardware, "PROBE_COMMAND", [sys.executable, "-c", script])
    tracemalloc.start()
    try:
        host = host_info()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (host.device, host.name, host.memory_gb) == ("cuda", "x", 1.0), host.name
    assert peak < 4 * 2**20, peak  # a few copies of the 64 KiB kept, not the 80 MB printed


def test_a_failure_with_junk_on_stderr_names_its_exit_code(
    gpu_host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = "import sys; sys.stderr.buffer.write(b'\\xff' * 100000 + b'\\nboom \\xfe'); sys.exit(3)"
    monkeypatch.setattr(hardware, "PROBE_COMMAND", [sys.executable, "-c", script])
    assert host_info().name == "GPU facts unknown: the GPU probe failed (exit code 3: boom \ufffd)"
