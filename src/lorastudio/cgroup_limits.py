"""What a container lets this process use: its memory room and its CPUs, from the cgroup it runs in.

Docker, Kubernetes and Slurm bound a process through its cgroup, which neither /proc/meminfo nor
os.cpu_count() sees: `docker run --cpus 4` on a 64-core host writes cpu.max "400000 100000" and
leaves the affinity mask at 64 CPUs, so torch's intra-op pool (OpenMP: one thread per core) and
Inductor's compile workers (min(32, affinity)) started 32 of each on a quota of 4 CPUs, throttled
for most of every period; and a memory limit is charged with the page cache the process's reads
fill (a model's weights read once, or warmed by jobs/prefetch.py), which the kernel reclaims
before it kills anything, so "limit less usage" was near zero after any large read.

Read here, by hand (torch._utils.cpu_count, psutil's cpu_count and os.process_cpu_count count the
affinity mask or the host, never a quota; /proc/meminfo is the host's):
- the process's own cgroup from /proc/self/cgroup, each level from it up to the mount's root
  that exists there (a cgroup namespace, Docker's default on v2, or a v1 container's bind mount
  shows the process's own cgroup as the mount's root; a Slurm step or a systemd unit without one
  sits deeper, under a parent that holds the job's limit), the smallest limit of them all;
- memory (`memory_room`): v2 memory.max less memory.current plus memory.stat's inactive_file
  (the page cache the kernel reclaims first: what kubelet and `docker stats` subtract too);
  v1 memory.limit_in_bytes (memory.stat's hierarchical_memory_limit at the process's level: a
  parent's the mount does not show) less usage_in_bytes plus total_inactive_file. "max", v1's
  unlimited 9223372036854771712 and a missing file are no limit. Swap (memory.swap.max) is not
  room: a run that pages its weights to swap is not one that fits;
- CPUs (`usable_cpus`): the affinity mask, lowered to the smallest quota (v2 cpu.max
  "quota period", v1 cpu.cfs_quota_us / cpu.cfs_period_us, -1 or "max": none), rounded up (a
  quota of 1.5 CPUs runs 2 threads, as the JDK counts it), at least 1.

`follow_cpu_limit` is called once by the console program before torch is imported: where a quota
narrows the CPUs, it sets OMP_NUM_THREADS and TORCHINDUCTOR_COMPILE_THREADS to them unless the
user set either (a value given is kept), so this process and every child it starts (a training
or generation worker, the standby, Inductor's compile pool) follow the container. A torchrun
launch's ranks get torchrun's own OMP_NUM_THREADS=1 back (jobs/torchrun_launch.rank_environment:
`drop_cpu_limit`), not the whole quota each.

`shm_problems` refuses a multi-GPU CUDA run where /dev/shm is a container's default 64 MB (NCCL
keeps its intra-node buffers there). No torch here.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from lorastudio.errors import FieldProblem

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
NO_LIMIT = 2**60  # v1 writes 9223372036854771712 (PAGE_COUNTER_MAX pages) for "no limit"
CPU_VARIABLES = ("OMP_NUM_THREADS", "TORCHINDUCTOR_COMPILE_THREADS")  # what follow_cpu_limit sets
CPU_LIMIT_MARK = "LORASTUDIO_CPUS_FROM_CGROUP"  # the names follow_cpu_limit set, comma-separated
SHM = Path("/dev/shm")
MIN_SHM_BYTES = 256 * 2**20  # a multi-GPU run's /dev/shm floor (shm_problems); Docker's default is 64 MB


def _read(path: Path) -> str | None:
    """The stripped text of a cgroup file; None where it is absent or unreadable."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _number(text: str | None) -> int | None:
    """`text` as a non-negative integer where it is one written in ASCII digits (at most 20: the
    kernel's largest, 2**64, has 20); None otherwise ("max", "-1", empty, absent, or what the
    kernel never writes: str.isdigit accepts "²" and int() refuses it, and int() refuses over
    4300 digits: either raised ValueError out of follow_cpu_limit, the program's first act)."""
    text = (text or "").strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 20 else None


def _own_paths(proc: Path) -> dict[str, str]:
    """Controller -> this process's cgroup path, from /proc/self/cgroup ("" for v2's unified
    line "0::/path"); empty where it cannot be read."""
    paths: dict[str, str] = {}
    for line in (_read(proc) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                paths[controller] = parts[2]
    return paths


def _where(root: Path | None, proc: Path | None) -> tuple[Path, dict[str, str]]:
    """The cgroup mount root (default CGROUP_ROOT) and this process's paths (from `proc`, default
    PROC_CGROUP): read at the call, so a test points both at a fake tree."""
    return root or CGROUP_ROOT, _own_paths(proc or PROC_CGROUP)


def _levels(mount: Path, path: str) -> list[Path]:
    """The folders of `mount` from the process's cgroup `path` up to the mount's root, those that
    exist (with a namespace or a bind mount only the root does: it is the process's cgroup)."""
    parts = [p for p in path.strip("/").split("/") if p and p != ".."]
    levels = [mount.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]
    return [level for level in levels if level.is_dir()]


def _stat(level: Path, key: str) -> int:
    """A memory.stat value in bytes at `level`; 0 where absent."""
    for line in (_read(level / "memory.stat") or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key and (number := _number(value)) is not None:
            return number
    return 0


def _v2_mount(root: Path) -> Path | None:
    """The unified (v2) hierarchy's mount: `root` itself (pure v2), else root/unified (hybrid)."""
    for mount in (root, root / "unified"):
        if (mount / "cgroup.controllers").is_file():
            return mount
    return None


def _memory_levels(root: Path | None, proc: Path | None) -> list[tuple[int, int]]:
    """(limit, held) in bytes of each of this process's cgroup levels that sets a memory limit;
    held: the usage less the page cache the kernel reclaims first."""
    root, own = _where(root, proc)
    found: list[tuple[int, int]] = []
    v2 = _v2_mount(root)
    for level in _levels(v2, own.get("", "/")) if v2 is not None else []:
        limit, usage = _number(_read(level / "memory.max")), _number(_read(level / "memory.current"))
        if limit is not None and usage is not None and limit < NO_LIMIT:
            found.append((limit, max(usage - _stat(level, "inactive_file"), 0)))
    v1 = root / "memory"
    for depth, level in enumerate(_levels(v1, own.get("memory", "/")) if v1.is_dir() else []):
        limit = _number(_read(level / "memory.limit_in_bytes"))
        usage = _number(_read(level / "memory.usage_in_bytes"))
        limits = [limit] if limit is not None else []
        if depth == 0 and _stat(level, "hierarchical_memory_limit"):
            limits.append(_stat(level, "hierarchical_memory_limit"))
        if limits and min(limits) < NO_LIMIT and usage is not None:
            found.append((min(limits), max(usage - _stat(level, "total_inactive_file"), 0)))
    return found


def memory_room(root: Path | None = None, proc: Path | None = None) -> int | None:
    """Bytes this process may still use under its cgroups' memory limits (the smallest room over
    its levels: the limit less the usage the kernel will not reclaim first); None where no level
    sets a limit."""
    levels = _memory_levels(root, proc)
    return min(max(limit - held, 0) for limit, held in levels) if levels else None


def memory_limit(root: Path | None = None, proc: Path | None = None) -> int | None:
    """The smallest memory limit over this process's cgroup levels, in bytes (what a refusal
    names); None where none sets one."""
    levels = _memory_levels(root, proc)
    return min(limit for limit, _ in levels) if levels else None


def cpu_quota(root: Path | None = None, proc: Path | None = None) -> float | None:
    """The smallest CPU quota over this process's cgroup levels, in CPUs (2.5: 250 ms of CPU time
    each 100 ms); None where no level sets one."""
    root, own = _where(root, proc)
    quotas: list[float] = []
    v2 = _v2_mount(root)
    for level in _levels(v2, own.get("", "/")) if v2 is not None else []:
        text, _, rest = (_read(level / "cpu.max") or "").partition(" ")
        quota, period = _number(text), _number(rest)
        if quota is not None and period:
            quotas.append(quota / period)
    for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        mount = root / name
        if not mount.is_dir():
            continue
        for level in _levels(mount, own.get("cpu", "/")):
            quota = _number(_read(level / "cpu.cfs_quota_us"))
            period = _number(_read(level / "cpu.cfs_period_us"))
            if quota is not None and period:
                quotas.append(quota / period)
        break
    return min(quotas) if quotas else None


def affinity_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; os.cpu_count() where there is none)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def usable_cpus(root: Path | None = None, proc: Path | None = None) -> int:
    """The CPUs this process can keep busy: its affinity mask, lowered to its cgroups' quota
    (rounded up), at least 1."""
    cpus = affinity_cpus()
    quota = cpu_quota(root, proc)
    return max(1, min(cpus, math.ceil(quota - 1e-9)) if quota is not None else cpus)


def follow_cpu_limit(
    env: MutableMapping[str, str] | None = None, root: Path | None = None, proc: Path | None = None
) -> str | None:
    """Where a cgroup quota leaves fewer CPUs than the affinity mask, set CPU_VARIABLES in `env`
    (default os.environ) to the usable CPUs, each only where the user has not set it, and mark
    which (CPU_LIMIT_MARK). Returns a line saying what was set, None where nothing was."""
    env = os.environ if env is None else env
    cpus, affinity = usable_cpus(root, proc), affinity_cpus()
    if cpus >= affinity:
        return None
    names = [name for name in CPU_VARIABLES if not env.get(name)]
    for name in names:
        env[name] = str(cpus)
    if not names:
        return None
    env[CPU_LIMIT_MARK] = ",".join(names)
    return f"the cgroup's CPU quota leaves {cpus} of {affinity} CPUs: {', '.join(names)}={cpus}"


def drop_cpu_limit(env: MutableMapping[str, str]) -> None:
    """Remove from `env` (a torchrun launch's) the OMP_NUM_THREADS follow_cpu_limit set, so that
    torchrun's own default (1 a rank) applies instead of the whole quota in every rank."""
    if "OMP_NUM_THREADS" in env.get(CPU_LIMIT_MARK, "").split(","):
        env.pop("OMP_NUM_THREADS", None)


def shm_bytes(path: Path = SHM) -> int | None:
    """The size of the shared-memory file system (/dev/shm); None where there is none."""
    try:
        vfs = os.statvfs(path)
    except OSError:
        return None
    return vfs.f_blocks * vfs.f_frsize


def shm_problems(num_gpus: int, env: Mapping[str, str] | None = None, path: Path = SHM) -> list[FieldProblem]:
    """Why a `num_gpus` > 1 CUDA run cannot start here: NCCL's intra-node buffers live in
    /dev/shm, and a container's default (Docker: 64 MB) is too small for them (NCCL's
    troubleshooting page: "Error while creating shared memory segment", or a bus error mid-run).
    NCCL_SHM_DISABLE=1 in the environment lifts it (NCCL then does without)."""
    env = os.environ if env is None else env
    size = shm_bytes(path)
    if num_gpus <= 1 or size is None or size >= MIN_SHM_BYTES or env.get("NCCL_SHM_DISABLE") == "1":
        return []
    return [
        FieldProblem(
            "num_gpus",
            f"num_gpus={num_gpus} needs NCCL's shared memory, and {path} holds {size / 2**20:.0f} MB"
            f" (under {MIN_SHM_BYTES // 2**20} MB: a container's default); start the container with"
            " --shm-size=1g (or --ipc=host; Kubernetes: an emptyDir of medium Memory at /dev/shm), or"
            " train on one GPU",
        )
    ]
