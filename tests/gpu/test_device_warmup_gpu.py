"""training/speed/device_warmup.py on a real GPU: the side thread makes the primary context that a
fresh process lacks, and a training step after it runs as before."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

CHILD = """
import json, torch
from lorastudio.training.speed.device_warmup import warm_device
before = bool(torch._C._cuda_hasPrimaryContext(0))
thread = warm_device(torch.device("cuda"))
thread.join(timeout=120)
after = bool(torch._C._cuda_hasPrimaryContext(0))
x = torch.randn(64, 64, device="cuda")
print(json.dumps({"before": before, "after": after, "alive": thread.is_alive(), "mm": float((x @ x).sum())}))
"""


def test_the_warm_up_thread_makes_the_primary_context_of_a_fresh_process():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["before"] is False and found["after"] is True and found["alive"] is False
