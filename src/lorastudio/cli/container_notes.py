"""The notes `lorastudio serve` prints when it runs in a container (Docker, Podman, Kubernetes):
what works differently there and what to pass instead. No torch.

- PID 1 without an init (`docker run` without `--init`): the kernel hands every orphaned
  process of the container to PID 1, and the server reaps only its own children, so a killed
  worker's own children (Inductor's compile workers, a probe) stay zombies; `--init` (tini)
  reaps them. The server's own SIGTERM (`docker stop`) is handled either way.
- loopback inside a container: a published port (`-p 7860:7860`) reaches the container's
  network interface, not its 127.0.0.1, so the studio answers nobody outside; `--host 0.0.0.0`
  with LORASTUDIO_API_TOKEN is the container's way (the token rule refuses 0.0.0.0 without one).
- a CPU quota: the thread counts cgroup_limits.follow_cpu_limit set at the program's start.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from lorastudio.cgroup_limits import CPU_LIMIT_MARK

CONTAINER_MARKS = (Path("/.dockerenv"), Path("/run/.containerenv"))  # Docker's, Podman's
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def in_container(env: Mapping[str, str] | None = None, marks: tuple[Path, ...] = CONTAINER_MARKS) -> bool:
    """Whether this process runs in a container: Docker's or Podman's mark file, or a
    Kubernetes pod's service variables."""
    env = os.environ if env is None else env
    return any(mark.exists() for mark in marks) or "KUBERNETES_SERVICE_HOST" in env


def serve_notes(
    host: str, *, pid: int | None = None, env: Mapping[str, str] | None = None, container: bool | None = None
) -> list[str]:
    """The `note:` lines for a server about to listen on `host` as process `pid` (default this
    one) with environment `env` (default os.environ); `container`: in_container() by default."""
    env = os.environ if env is None else env
    pid = os.getpid() if pid is None else pid
    container = in_container(env) if container is None else container
    notes = []
    if pid == 1:
        notes.append(
            "note: the server is PID 1 with no init: it reaps only its own processes, so a killed"
            " worker's children stay zombies; start the container with --init (docker run --init,"
            " Kubernetes: shareProcessNamespace or an init such as tini)"
        )
    if container and host in LOOPBACK:
        notes.append(
            f"note: listening on {host} inside a container: a published port cannot reach it; pass"
            " --host 0.0.0.0 (or LORASTUDIO_HOST=0.0.0.0) with LORASTUDIO_API_TOKEN set"
        )
    set_names = [name for name in env.get(CPU_LIMIT_MARK, "").split(",") if name]
    if set_names:
        values = ", ".join(f"{name}={env.get(name, '?')}" for name in set_names)
        notes.append(
            f"note: the container's CPU quota is below this host's CPUs: {values} (set either to override)"
        )
    return notes
