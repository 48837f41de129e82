"""The pieces of a data-parallel launch (jobs/launcher.py's TorchrunWorker) that need no state:
the command line (torchrun's agent bound to the server's lifetime, jobs/agent.py, starting N
ranks, jobs/rank_worker.py), the ranks' environment and CUDA_VISIBLE_DEVICES, and the SIGKILL of
a rank that may be gone already. No torch here.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

from lorastudio.cgroup_limits import drop_cpu_limit
from lorastudio.jobs.channel import CHANNEL_ENV
from lorastudio.jobs.childenv import child_environment

AGENT_MODULE = "lorastudio.jobs.agent"
RANK_MODULE = "lorastudio.jobs.rank_worker"
# torchrun's environment of an enclosing launch must not leak into the ranks' rendezvous
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def torchrun_command(server_pid: int, world_size: int, log_dir: Path) -> list[str]:
    """The command line of a launch of `world_size` ranks bound to process `server_pid`
    (torchrun's own bookkeeping folder: `log_dir`)."""
    return [
        sys.executable,
        "-m",
        AGENT_MODULE,
        str(server_pid),
        "--standalone",
        "--nnodes=1",
        f"--nproc-per-node={world_size}",
        "--max-restarts=0",
        f"--log-dir={log_dir}",
        "-m",
        RANK_MODULE,
    ]


def visible_devices(reserved: tuple[int, ...], server_visible: str | None) -> str:
    """CUDA_VISIBLE_DEVICES of the ranks: the reserved indices, taken among the server's own
    CUDA_VISIBLE_DEVICES when it has one (index i = its i-th entry)."""
    if server_visible is None or not server_visible.strip():
        return ",".join(str(i) for i in reserved)
    entries = [e.strip() for e in server_visible.split(",") if e.strip()]
    return ",".join(entries[i] for i in reserved)


def kill_quietly(pid: int) -> None:
    """SIGKILL process `pid`; one already gone (or not ours) is left as it is."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def rank_environment(devices: tuple[int, ...] | None, channel: str) -> dict[str, str]:
    """The ranks' environment: the server's without its secrets (the ranks get the hub token in
    their RankJob) or an enclosing launch's torchrun variables, the channel's address, and
    CUDA_VISIBLE_DEVICES = the reserved `devices` (None: "" for gloo ranks on the CPU)."""
    env = child_environment(os.environ)
    drop_cpu_limit(env)  # torchrun's OMP_NUM_THREADS=1 a rank, not the container's quota in each
    for name in LAUNCH_VARIABLES:
        env.pop(name, None)
    env[CHANNEL_ENV] = channel
    env["CUDA_VISIBLE_DEVICES"] = (
        "" if devices is None else visible_devices(devices, os.environ.get("CUDA_VISIBLE_DEVICES"))
    )
    return env
