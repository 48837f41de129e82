"""A run killed while it wrote or rotated a LoRA snapshot left the snapshot's sidecar without its
LoRA, which no listing showed and no rotation removed (session 35 long-run audit, RELIABILITY
1295): `keep_loras`' rotation now removes those of earlier steps. Files only, no training."""

from __future__ import annotations

from pathlib import Path

from lorastudio.lora.snapshots import SnapshotKeeper, list_lora_snapshots
from lorastudio.training.resume.run_files import LORAS, snapshot_name


def _pair(folder: Path, step: int, lora: bool = True) -> Path:
    stem = snapshot_name("run", step)
    (folder / f"{stem}.json").write_text(f'{{"steps": {step}}}')
    if lora:
        (folder / f"{stem}.safetensors").write_bytes(b"\0")
    return folder / f"{stem}.safetensors"


def test_keep_loras_removes_the_sidecars_a_killed_rotation_left(tmp_path: Path) -> None:
    folder = tmp_path / "run" / LORAS
    folder.mkdir(parents=True)
    for step in (100, 200):
        _pair(folder, step)
    _pair(folder, 50, lora=False)  # killed between remove_snapshot's two unlinks
    _pair(folder, 150, lora=False)  # killed between write_lora_pair's two renames, resumed later
    _pair(folder, 400, lora=False)  # a later step's: not before the snapshot written, kept
    (folder / "notes.json").write_text("{}")  # not a snapshot's: kept
    newest = _pair(folder, 300)
    keeper = SnapshotKeeper(tmp_path / "run", 100, 2)
    keeper.record(newest)
    keeper.finish()  # the session ended well: keep_loras over the snapshots it found too
    assert [step for step, _ in list_lora_snapshots(tmp_path / "run")] == [200, 300]
    assert sorted(p.name for p in folder.iterdir()) == [
        "notes.json",
        "run-step-000200.json",
        "run-step-000200.safetensors",
        "run-step-000300.json",
        "run-step-000300.safetensors",
        "run-step-000400.json",
    ]  # old: run-step-000050.json and run-step-000150.json stayed for good
