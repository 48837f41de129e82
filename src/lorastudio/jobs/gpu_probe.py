"""The GPU facts as torch sees them, for jobs/hardware.host_info.

`python -m lorastudio.jobs.gpu_probe` (the server's short child: the server never imports torch)
imports torch, prints one JSON line of `facts()` and exits 0. The same `facts()` runs in a process
that has torch already (a training worker, the CLI's `train`). It allocates nothing on a GPU
beyond the driver's own context.

The answer: {"cuda": torch.cuda.is_available(), "devices": [{"name", "total_memory" (bytes),
"capability": [major, minor]} for each GPU visible], "visible": CUDA_VISIBLE_DEVICES (None:
unset), "torch": torch's version, "cuda_version": the CUDA torch was built with (None: a CPU
build)}: the devices as CUDA_VISIBLE_DEVICES and torch's build see them.
"""

from __future__ import annotations

import json
import os
from typing import Any


def facts() -> dict[str, Any]:
    """The GPU facts (see the module docstring). Raises what torch raises (a broken driver)."""
    import torch

    available = torch.cuda.is_available()
    devices = []
    for index in range(torch.cuda.device_count() if available else 0):
        props = torch.cuda.get_device_properties(index)
        devices.append(
            {"name": props.name, "total_memory": props.total_memory, "capability": [props.major, props.minor]}
        )
    return {
        "cuda": available,
        "devices": devices,
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "torch": str(torch.__version__),
        "cuda_version": torch.version.cuda,
    }


def main() -> None:
    print(json.dumps(facts()), flush=True)


if __name__ == "__main__":
    main()
