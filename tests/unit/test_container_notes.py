"""`lorastudio serve`'s notes in a container (cli/container_notes.py): PID 1 without an init,
loopback that a published port cannot reach, the thread counts a CPU quota set."""

from __future__ import annotations

from pathlib import Path

from lorastudio.cgroup_limits import CPU_LIMIT_MARK
from lorastudio.cli.container_notes import in_container, serve_notes


def test_container_marks(tmp_path: Path) -> None:
    """Docker's /.dockerenv (or Podman's file) or Kubernetes' variables say "container"."""
    mark = tmp_path / ".dockerenv"
    assert not in_container({}, (mark,))
    mark.touch()
    assert in_container({}, (mark,))
    assert in_container({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, ())


def test_notes_for_pid_1_loopback_and_a_quota() -> None:
    """Each note only where it applies: PID 1 says --init; loopback in a container says 0.0.0.0
    with the token; the quota's variables are named with their values."""
    env = {CPU_LIMIT_MARK: "OMP_NUM_THREADS", "OMP_NUM_THREADS": "4"}
    notes = serve_notes("127.0.0.1", pid=1, env=env, container=True)
    assert len(notes) == 3
    assert "--init" in notes[0] and "--host 0.0.0.0" in notes[1] and "OMP_NUM_THREADS=4" in notes[2]
    assert serve_notes("127.0.0.1", pid=42, env={}, container=False) == []
    assert serve_notes("0.0.0.0", pid=42, env={}, container=True) == []
