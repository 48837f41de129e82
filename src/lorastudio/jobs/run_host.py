"""The host's facts as a run sees them: the GPU it trains on first.

jobs/hardware.host_info answers for the visible GPUs with GPU 0's name, memory, compute
capability and precisions. A run on another card (`lorastudio train --device cuda:1`: an RTX 2080
Ti beside an RTX 3090 at cuda:0) or over several (`num_gpus`: a rank per GPU, the first
`num_gpus` visible) was judged on GPU 0's facts: its card fit, its precisions (bf16 on the
3090, none on the 2080 Ti) and its attention kernels, while the engine judges its own device and
refused it only after the job was queued, or a rank in, or not at all. No torch here.
"""

from __future__ import annotations

import dataclasses

from lorastudio.jobs.hardware import HostInfo, precisions_for


def gpu_index(device: str | None) -> int:
    """The CUDA index `device` names ("cuda:1" -> 1); 0 for None, "cuda" or another form (the
    device's own check, cli/train_check.device_problems, refuses what the run cannot use)."""
    if device is None:
        return 0
    kind, _, index = device.strip().lower().partition(":")
    ok = index.isascii() and index.isdecimal()  # "²" and "١" are digits to isdigit: int() refuses the first
    return int(index) if kind == "cuda" and ok else 0


def host_for_run(host: HostInfo, device: str | None = None, num_gpus: int = 1) -> HostInfo:
    """`host` re-ordered for a run on `device` (None: the visible GPUs' first, as the job service
    places it) over `num_gpus` ranks: the named GPU first, the others after it in their order
    (`gpu_memory_gb` and `gpus` too, so card_fit's smallest of the first `num_gpus` is the run's);
    name, memory_gb, capability and precisions of the GPU the run trains on, or with several ranks
    of the one of lowest compute capability among them (what every rank must run: "NAME (the
    weakest of the run's N GPUs)"). `host` unchanged off CUDA, without per-GPU facts, or for an
    index past the visible GPUs."""
    index = gpu_index(device)
    if host.device != "cuda" or not host.gpus or index >= len(host.gpus):
        return host
    order = [index, *(i for i in range(len(host.gpus)) if i != index)]
    gpus = tuple(host.gpus[i] for i in order)
    used = gpus[: max(num_gpus, 1)]
    name, memory_gb, capability = min(used, key=lambda gpu: gpu[2]) if len(used) > 1 else used[0]
    if len({gpu[0] for gpu in used}) > 1:
        name = f"{name} (the weakest of the run's {len(used)} GPUs)"
    return dataclasses.replace(
        host,
        name=name,
        memory_gb=gpus[0][1],
        precisions=precisions_for("cuda", capability),
        gpu_memory_gb=tuple(gpu[1] for gpu in gpus),
        capability=capability,
        gpus=gpus,
    )
