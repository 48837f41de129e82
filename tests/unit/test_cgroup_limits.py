"""A container's limits as this process reads them (lorastudio/cgroup_limits.py), over fake cgroup
trees: Docker on cgroup v2 (a namespace: the mount's root is the container), a Slurm step (v2, the
limit on a parent of the process's cgroup), Docker on v1 (hierarchical_memory_limit), and what the
CPU quota does to the threads of this process and of a torchrun launch's ranks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lorastudio import cgroup_limits
from lorastudio.cgroup_limits import CPU_LIMIT_MARK, follow_cpu_limit, memory_limit, memory_room, usable_cpus
from lorastudio.jobs import host_memory
from lorastudio.jobs.hardware import HostInfo, precisions_for
from lorastudio.jobs.host_rules import raw_host_problems
from lorastudio.jobs.torchrun_launch import rank_environment
from lorastudio.settings import get_settings

GB = 10**9


def _tree(tmp_path: Path, own: str, files: dict[str, str]) -> tuple[Path, Path]:
    """A cgroup mount under tmp_path/cg holding `files` (path -> text) and a /proc/self/cgroup
    naming `own` (its lines); returns (root, proc)."""
    root = tmp_path / "cg"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text + "\n", encoding="utf-8")
    proc = tmp_path / "proc_cgroup"
    proc.write_text(own, encoding="utf-8")
    return root, proc


@pytest.fixture
def many_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 64-CPU host's affinity mask (Docker's --cpus leaves it whole)."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))


def test_docker_v2_page_cache_is_room_not_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An 8 GB container that has read 7 GB of weights: the page cache (inactive_file) is charged to
    memory.current but the kernel reclaims it before anything is killed. The old reading, limit less
    usage, said 0.1 GB were left and refused (or skipped prefetching) a run that fits."""
    root, proc = _tree(tmp_path, "0::/\n", {
        "cgroup.controllers": "cpu memory",
        "memory.max": str(8 * GB),
        "memory.current": str(int(7.9 * GB)),
        "memory.stat": f"anon {int(0.9 * GB)}\nactive_file 0\ninactive_file {7 * GB}",
    })  # fmt: skip
    assert memory_room(root, proc) == int(7.1 * GB) and memory_limit(root, proc) == 8 * GB
    monkeypatch.setattr(cgroup_limits, "CGROUP_ROOT", root)
    monkeypatch.setattr(cgroup_limits, "PROC_CGROUP", proc)
    meminfo = Path("/proc/meminfo").read_text(encoding="utf-8").split("MemAvailable:")[1].split()[0]
    assert host_memory.available_host_bytes() == min(int(7.1 * GB), int(meminfo) * 1024)


def test_available_memory_follows_the_container(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """available_host_bytes reads the process's cgroup (not the fixed paths of the host's root): a
    1 GB container with no page cache has 0.5 GB left when it uses 0.5 GB."""
    root, proc = _tree(tmp_path, "0::/\n", {
        "cgroup.controllers": "memory", "memory.max": str(GB), "memory.current": str(GB // 2),
        "memory.stat": "inactive_file 0",
    })  # fmt: skip
    monkeypatch.setattr(cgroup_limits, "CGROUP_ROOT", root)
    monkeypatch.setattr(cgroup_limits, "PROC_CGROUP", proc)
    assert host_memory.available_host_bytes() == GB // 2


def test_slurm_step_limit_on_a_parent(tmp_path: Path, many_cpus: None) -> None:
    """A Slurm job: the process's own cgroup (step_0) says "max", its job's cgroup holds 16 GB and
    3 CPUs; no namespace, so the process's path is read under the mount. Both are found there."""
    step = "system.slice/slurmstepd.scope/job_7/step_0"
    root, proc = _tree(tmp_path, f"0::/{step}\n", {
        "cgroup.controllers": "cpu memory",
        f"{step}/memory.max": "max", f"{step}/memory.current": str(GB), f"{step}/cpu.max": "max 100000",
        "system.slice/slurmstepd.scope/job_7/memory.max": str(16 * GB),
        "system.slice/slurmstepd.scope/job_7/memory.current": str(4 * GB),
        "system.slice/slurmstepd.scope/job_7/cpu.max": "300000 100000",
    })  # fmt: skip
    assert memory_room(root, proc) == 12 * GB and memory_limit(root, proc) == 16 * GB
    assert usable_cpus(root, proc) == 3


def test_docker_v1_hierarchical_limit_and_unlimited(tmp_path: Path, many_cpus: None) -> None:
    """Docker on v1: the mount's root is the container (its /proc path, /docker/<id>, is not under
    the mount); memory.limit_in_bytes says unlimited but memory.stat's hierarchical_memory_limit
    holds a parent's 4 GB, and total_inactive_file is room. A CPU quota of 1.5 runs 2 threads."""
    root, proc = _tree(tmp_path, "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n", {
        "memory/memory.limit_in_bytes": "9223372036854771712",
        "memory/memory.usage_in_bytes": str(3 * GB),
        "memory/memory.stat": f"hierarchical_memory_limit {4 * GB}\ntotal_inactive_file {2 * GB}",
        "cpu,cpuacct/cpu.cfs_quota_us": "150000", "cpu,cpuacct/cpu.cfs_period_us": "100000",
    })  # fmt: skip
    assert memory_room(root, proc) == 3 * GB and memory_limit(root, proc) == 4 * GB
    assert usable_cpus(root, proc) == 2


def test_no_limits_anywhere(tmp_path: Path, many_cpus: None) -> None:
    """v2 "max" everywhere and v1's -1 quota: no limit, the affinity mask's CPUs."""
    root, proc = _tree(tmp_path, "0::/\n", {
        "cgroup.controllers": "cpu memory", "memory.max": "max", "memory.current": "5",
        "cpu.max": "max 100000", "cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000",
    })  # fmt: skip
    assert memory_room(root, proc) is None and memory_limit(root, proc) is None
    assert usable_cpus(root, proc) == 64


def test_cpu_quota_sets_threads_unless_the_user_did(tmp_path: Path, many_cpus: None) -> None:
    """docker run --cpus 4 on 64 CPUs: OMP_NUM_THREADS and TORCHINDUCTOR_COMPILE_THREADS become 4
    (torch's OpenMP pool and Inductor's min(32, affinity) workers took 32 each); a value the user
    gave is kept; a torchrun launch's ranks get torchrun's own default back."""
    root, proc = _tree(tmp_path, "0::/\n", {"cgroup.controllers": "cpu", "cpu.max": "400000 100000"})
    env: dict[str, str] = {}
    assert follow_cpu_limit(env, root, proc) is not None
    assert env["OMP_NUM_THREADS"] == env["TORCHINDUCTOR_COMPILE_THREADS"] == "4"
    assert env[CPU_LIMIT_MARK] == "OMP_NUM_THREADS,TORCHINDUCTOR_COMPILE_THREADS"
    mine = {"OMP_NUM_THREADS": "2"}
    follow_cpu_limit(mine, root, proc)
    assert mine["OMP_NUM_THREADS"] == "2" and mine["TORCHINDUCTOR_COMPILE_THREADS"] == "4"
    wide, _ = _tree(tmp_path / "wide", "0::/\n", {"cgroup.controllers": "cpu", "cpu.max": "max 100000"})
    untouched: dict[str, str] = {}
    assert follow_cpu_limit(untouched, wide, proc) is None and untouched == {}


def test_ranks_get_torchruns_thread_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """The OMP_NUM_THREADS follow_cpu_limit set is not handed to every rank (each would run the
    whole quota's threads); the user's own is."""
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    monkeypatch.setenv(CPU_LIMIT_MARK, "OMP_NUM_THREADS,TORCHINDUCTOR_COMPILE_THREADS")
    assert "OMP_NUM_THREADS" not in rank_environment((0, 1), "/tmp/channel")
    monkeypatch.delenv(CPU_LIMIT_MARK)
    assert rank_environment((0, 1), "/tmp/channel")["OMP_NUM_THREADS"] == "4"


def test_refusal_names_the_container_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run forecast over what a 2 GB container leaves is refused before loading, naming the limit."""
    root, proc = _tree(tmp_path, "0::/\n", {
        "cgroup.controllers": "memory", "memory.max": str(2 * GB), "memory.current": "0",
    })  # fmt: skip
    monkeypatch.setattr(cgroup_limits, "CGROUP_ROOT", root)
    monkeypatch.setattr(cgroup_limits, "PROC_CGROUP", proc)

    class Cfg:
        resolution, batch_size, cache_variants, latent_cache_max_gb = 512, 1, 1, 1.0

    with pytest.raises(host_memory.HostMemoryShort, match=r"cgroup limits it to 2\.00 GB"):
        host_memory.check_host_memory({"host_gb": 3.0, "certain": True}, Cfg(), 2 * GB)  # type: ignore[arg-type]


def test_multi_gpu_needs_more_than_dockers_shm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Docker's default /dev/shm (64 MB) is too small for NCCL's buffers: a 2-GPU run is refused
    before it starts, naming --shm-size (the ranks failed in NCCL's init or with a bus error);
    NCCL_SHM_DISABLE=1 lifts it, and a one-GPU run never asks."""
    real = os.statvfs

    def small(path: object) -> os.statvfs_result:
        if str(path) != "/dev/shm":
            return real(path)  # type: ignore[arg-type]
        return os.statvfs_result((4096, 4096, 64 * 2**20 // 4096, 0, 0, 0, 0, 0, 0, 255))

    monkeypatch.setattr(os, "statvfs", small)
    monkeypatch.delenv("NCCL_SHM_DISABLE", raising=False)
    gpus = HostInfo("cuda", "H100", 80.0, precisions_for("cuda", (9, 0)), gpu_count=2)
    problems = raw_host_problems({"num_gpus": 2, "batch_size": 2}, set(), get_settings(), gpus)
    assert [p.field for p in problems] == ["num_gpus"] and "--shm-size=1g" in problems[0].message
    assert "/dev/shm holds 64 MB" in problems[0].message
    assert raw_host_problems({"num_gpus": 1}, set(), get_settings(), gpus) == []
    monkeypatch.setenv("NCCL_SHM_DISABLE", "1")
    assert raw_host_problems({"num_gpus": 2, "batch_size": 2}, set(), get_settings(), gpus) == []


def test_numbers_the_kernel_never_writes_are_no_limit(
    tmp_path: Path, many_cpus: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELIABILITY 1240: a cgroup file holding what str.isdigit accepts and int() refuses (a
    superscript digit; over 4300 digits) raised ValueError out of follow_cpu_limit, the console
    program's first act, so no `lorastudio` command started. Each is now no limit; a plain quota
    beside them still counts."""
    root, proc = _tree(tmp_path, "0::/a/b\n", {
        "cgroup.controllers": "cpu memory",
        "a/b/cpu.max": "²00000 100000",
        "a/b/memory.max": "9" * 5000,
        "a/b/memory.current": "1",
        "a/memory.max": str(8 * GB),
        "a/memory.current": str(GB),
        "a/memory.stat": "inactive_file ²",
        "a/cpu.max": "400000 100000",
    })  # fmt: skip
    env: dict[str, str] = {}
    assert follow_cpu_limit(env, root, proc) is not None and env["OMP_NUM_THREADS"] == "4"
    assert memory_room(root, proc) == 7 * GB and memory_limit(root, proc) == 8 * GB
