"""The snapshot an extension keeps of the run's LoRA before it trains on (`keep_final_as_snapshot`,
"train longer"), killed while it writes (session 28 chaos audit). Its sidecar was written in
place, beside the staged LoRA: a kill -9 (or a failed write) inside that write left a half
`loras/<name>-step-N.json` under its real name, which nothing removed (a server start removes
only staging names). Now the sidecar is staged and renamed like every pair (sidecar first, the
LoRA last): a kill leaves only staging names, and the extension redone writes the pair whole."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lorastudio import json_read
from lorastudio.errors import NoSpaceLeft, WriteFailed
from lorastudio.lora import snapshots
from lorastudio.lora.snapshots import keep_final_as_snapshot, list_lora_snapshots
from lorastudio.training.resume.run_files import is_leftover

# A process that keeps the snapshot of `run_dir` and is killed (SIGKILL, no cleanup) once half
# of the sidecar's text reached the disk.
_KILLED_MID_SIDECAR = """
import os, signal, sys
from pathlib import Path
real = Path.write_text
def half_then_killed(self, text, *args, **kwargs):
    real(self, text[: len(text) // 2], *args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
Path.write_text = half_then_killed
from lorastudio.lora.snapshots import keep_final_as_snapshot
keep_final_as_snapshot(Path(sys.argv[1]))
"""


def test_a_kill_inside_the_kept_snapshots_sidecar_write_leaves_no_half_file(tmp_path: Path) -> None:
    run_dir = tmp_path / "ext"
    run_dir.mkdir()
    lora = os.urandom(4096)
    (run_dir / "ext.safetensors").write_bytes(lora)
    sidecar = {"steps": 10, "config": {"output_name": "ext", "steps": 10}, "family": "flux"}
    (run_dir / "ext.json").write_text(json.dumps(sidecar), encoding="utf-8")
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_MID_SIDECAR, str(run_dir)], capture_output=True, timeout=120
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    loras = run_dir / "loras"
    left = sorted(p.name for p in loras.iterdir())
    assert left and all(is_leftover(name) for name in left), left  # only staging: a server start removes it
    assert list_lora_snapshots(run_dir) == []
    kept = keep_final_as_snapshot(run_dir)  # the extension redone
    assert kept == loras / "ext-step-000010.safetensors" and kept.read_bytes() == lora
    written = json_read.loads(kept.with_suffix(".json").read_text(encoding="utf-8"))
    assert written == {**sidecar, "snapshot": True, "lora_file": "loras/ext-step-000010.safetensors"}
    assert list_lora_snapshots(run_dir) == [(10, kept)]


@pytest.mark.parametrize("code", [errno.EROFS, errno.ENOSPC])
def test_a_refused_snapshot_copy_is_named_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """`train --resume RUN --set steps=N` of a run on a read-only (or full) disk: the copy's
    OSError named only the hidden staging file ("error: Read-only file system:
    .../loras/.staging-cc37612e.safetensors"); now what and where, and what to do (RELIABILITY 1076)."""
    run_dir = tmp_path / "ext"
    run_dir.mkdir()
    (run_dir / "ext.safetensors").write_bytes(os.urandom(64))
    (run_dir / "ext.json").write_text(json.dumps({"steps": 10, "family": "flux"}), encoding="utf-8")

    def refused(src: object, dst: object, *args: object, **kwargs: object) -> None:
        raise OSError(code, os.strerror(code), os.fsdecode(dst))

    monkeypatch.setattr(snapshots.shutil, "copyfile", refused)
    with pytest.raises(WriteFailed if code == errno.EROFS else NoSpaceLeft) as failed:  # was OSError
        keep_final_as_snapshot(run_dir)
    target = run_dir / "loras" / "ext-step-000010.safetensors"
    assert f"the LoRA of step 10 could not be kept as a snapshot before the run goes on ({target})" in str(
        failed.value
    )
    assert list((run_dir / "loras").iterdir()) == []
