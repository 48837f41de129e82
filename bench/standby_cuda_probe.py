"""Which of the standby worker's imports (jobs/standby.PRELOAD) initialises CUDA on a GPU host,
and from where: each module imported in a fresh interpreter with torch.cuda._lazy_init traced.

    python -m bench.standby_cuda_probe

Prints one JSON line per module: whether CUDA was initialised after its import, on which devices
a CUDA context exists then (jobs/standby_cuda.devices_with_context) and whether nvidia-smi lists
the process (a context's GPU memory), and the first initialising call's stack (innermost frames
last) when it was.
"""

from __future__ import annotations

import json
import subprocess
import sys

from lorastudio.jobs.standby import PRELOAD

CHILD = r"""
import json, sys, traceback
import torch
import torch.cuda
stacks = []
orig = torch.cuda._lazy_init
def traced():
    if not torch.cuda.is_initialized() and not stacks:
        stacks.append(traceback.format_stack(limit=30)[:-1])
    return orig()
torch.cuda._lazy_init = traced
import importlib
error = None
try:
    importlib.import_module(sys.argv[1])
except Exception as err:
    error = repr(err)[:300]
import os, subprocess
from lorastudio.jobs.standby_cuda import devices_with_context
initialized = torch.cuda.is_initialized()
try:  # this process in the GPU's list of compute processes: it holds a context (GPU memory)
    apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                          capture_output=True, text=True, timeout=30).stdout
    in_smi = [line for line in apps.splitlines() if line.split(",")[0].strip() == str(os.getpid())]
except (OSError, subprocess.SubprocessError) as err:
    in_smi = [repr(err)]
print(json.dumps({"module": sys.argv[1], "cuda_initialized": initialized,
                  "contexts": devices_with_context(torch) if initialized else [], "in_nvidia_smi": in_smi,
                  "error": error, "stack": [line.strip()[:300] for line in (stacks[0] if stacks else [])][-14:]}))
"""


def main() -> None:
    for name in PRELOAD:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, name], capture_output=True, text=True, timeout=300
        )
        line = done.stdout.strip().splitlines()[-1:] or [
            json.dumps({"module": name, "rc": done.returncode, "stderr": done.stderr[-500:]})
        ]
        print(line[0], flush=True)


if __name__ == "__main__":
    main()
