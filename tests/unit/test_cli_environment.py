"""The process environments users run the CLI and the server in (session 30 environment audit):
a working folder deleted under the command. Each limited part runs in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "LORASTUDIO_HOME": str(home), "PYTHONPATH": os.pathsep.join(sys.path)}


def _run_script(script: str, home: Path) -> subprocess.CompletedProcess:
    """`python -c script` with a studio home of its own (its output as text)."""
    return subprocess.run(
        [sys.executable, "-c", script], env=_env(home), capture_output=True, text=True, timeout=120
    )


def test_a_command_in_a_deleted_folder_is_refused_naming_it(tmp_path: Path) -> None:
    """Before: `train` died importing torch ("Intel oneMKL FATAL ERROR"), a relative
    LORASTUDIO_HOME was a bare "error: No such file or directory"."""
    gone = tmp_path / "gone"
    gone.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "lorastudio.cli", "runs", "list"],
        cwd=gone,
        preexec_fn=lambda: os.rmdir(gone),  # noqa: PLW1509 (the child's own folder, nothing threaded)
        env={**_env(tmp_path / "home"), "LORASTUDIO_HOME": "relative-home"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done
    assert done.stderr.startswith("error: the current folder no longer exists"), done.stderr
    assert "cd to a folder that exists" in done.stderr and "Traceback" not in done.stderr


def test_a_worker_spawns_once_the_working_folder_is_deleted(tmp_path: Path) -> None:
    """The job service's spawn (and the standby's fingerprint, which read os.getcwd()) in a
    process whose folder was deleted after its start: the worker runs, from "/"."""
    gone = tmp_path / "gone"
    gone.mkdir()
    script = textwrap.dedent(
        f"""
        import os
        os.chdir({str(gone)!r}); os.rmdir({str(gone)!r})
        from lorastudio.jobs.standby import spawn_fingerprint
        assert spawn_fingerprint()[1] == "/"
        from lorastudio.processes import spawn_context
        child = spawn_context().Process(target=os.getcwd)
        child.start(); child.join(60)
        print("exit", child.exitcode, os.getcwd())
        """
    )
    done = _run_script(script, tmp_path / "home")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["exit", "0", "/"]


def test_small_files_are_read_under_an_address_space_limit(tmp_path: Path) -> None:
    """A cache shard, a decoded-images record and a gallery sidecar of a few bytes, read with
    32 MiB of address space left (`ulimit -v`): fh.read(cap) made a buffer of the cap up front
    (1 GiB for a shard, 64 MB for a record: a run under the limit died of MemoryError)."""
    script = textwrap.dedent(
        f"""
        import resource
        from pathlib import Path
        from lorastudio.data import decoded
        from lorastudio.data.cache_io import read_shard_bytes, write_shard_bytes
        from lorastudio.jobs.gallery_sidecars import read_sidecar
        root = Path({str(tmp_path)!r})
        shard = root / "latents" / "model" / "ab" / "abcdef.safetensors"
        assert write_shard_bytes(shard, b"x" * 100)
        (root / "record.json").write_text('{{"version": 0}}')
        (root / "image.json").write_text('{{"prompt": "a star"}}')
        used = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (used + (32 << 20), resource.RLIM_INFINITY))
        assert read_shard_bytes(shard) == b"x" * 100
        assert decoded._read_record(root / "record.json") == {{}}
        assert read_sidecar(root / "image.json")["prompt"] == "a star"
        print("read")
        """
    )
    done = _run_script(script, tmp_path / "home")
    assert (done.returncode, done.stdout) == (0, "read\n"), done.stderr[-2000:]


def test_out_of_memory_under_an_address_space_limit_is_one_line(tmp_path: Path) -> None:
    """`ulimit -v` too small for torch: one line naming the limit (was an ImportError traceback
    of "failed to map segment from shared object")."""
    import resource

    done = subprocess.run(
        [sys.executable, "-m", "lorastudio.cli", "tiny", "model", "-f", "flux", "-o", str(tmp_path / "tiny")],
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (400 << 20, resource.RLIM_INFINITY)),  # noqa: PLW1509
        env=_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done
    assert done.stderr.startswith("error: a library could not be loaded (out of memory): "), done.stderr[
        -2000:
    ]
    assert "at most 400 MiB of address space" in done.stderr and "Traceback" not in done.stderr
