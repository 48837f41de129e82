"""LoRA snapshots of a run: the LoRA at an intermediate step, in the run's layout, with its
sidecar, ready for diffusers / ComfyUI like the final file. No torch here (what is written is
training/adapters/export.py's business).

Layout: <run_dir>/loras/<output_name>-step-000500.safetensors + <output_name>-step-000500.json
(the sidecar: the run's sidecar format with "steps" = the snapshot's step and "snapshot": true).
Written at every checkpoint and every `save_lora_every` steps; the newest `keep_loras` are kept
(None: all). The pair is written through a staging folder (sidecar first, LoRA last), so a
snapshot whose .safetensors is visible is complete.

Weights: snapshots hold the raw (trained) adapter weights. With EMA (ema_decay) the run's
<name>.safetensors holds the EMA weights and <name>.raw.safetensors the raw ones; each sidecar's
"ema": {"weights": "ema" | "raw"} says which (`file_weights`). The validation loss is measured on
the raw weights, so "the LoRA of step N" for validation, download and generation is the raw one:
a snapshot, or <name>.raw.safetensors for the final step (`raw_lora_at`). The EMA weights of a
checkpoint's step are kept in that checkpoint's folder, checkpoints/step-N/<name>-step-N.ema
.safetensors + .json (training/adapters/export.save_ema_step_lora), removed with the checkpoint by
keep_last (`ema_step_loras`; with the final EMA file: `ema_lora_at`, Generate's `"weights": "ema"`),
and those of the newest previewed step no checkpoint keeps in samples/ (`ema_preview_loras`: one
pair, replaced at each such sample round, training/ema_preview.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from lorastudio import json_read
from lorastudio.errors import writing
from lorastudio.folder_entries import entries
from lorastudio.training.resume.folder_guard import check_folder, replace_in_run
from lorastudio.training.resume.run_files import (
    CHECKPOINTS,
    LORAS,
    SAMPLES,
    checkpoint_step,
    ema_preview_step,
    ema_step_name,
    snapshot_name,
    staging_path,
)
from lorastudio.training.resume.run_files import snapshot_step as _step_of_name


def snapshot_step(path: Path) -> int | None:
    """The step of a snapshot file name, or None when the name is not one."""
    return _step_of_name(path.name)


def list_lora_snapshots(run_dir: Path) -> list[tuple[int, Path]]:
    """[(step, .safetensors path)] of the run's complete snapshots (a LoRA and its sidecar),
    oldest step first."""
    folder = run_dir / LORAS
    if not folder.is_dir():
        return []
    found = []
    for path in entries(folder):  # gone since the check (a run delete): none
        step = snapshot_step(path)
        if step is not None and path.is_file() and path.with_suffix(".json").is_file():
            found.append((step, path))
    return sorted(found)


def ema_step_loras(run_dir: Path) -> list[tuple[int, Path]]:
    """[(step, .safetensors path)] of the EMA weights its checkpoints keep (an EMA run's
    checkpoints/step-N/<name>-step-N.ema.safetensors with its sidecar), oldest step first."""
    folder = run_dir / CHECKPOINTS
    if not folder.is_dir():
        return []
    found = []
    for checkpoint in folder.iterdir():
        step = checkpoint_step(checkpoint.name)
        if step is None or checkpoint.is_symlink() or not checkpoint.is_dir():
            continue
        path = checkpoint / f"{ema_step_name(run_dir.name, step)}.safetensors"
        if path.is_file() and path.with_suffix(".json").is_file():
            found.append((step, path))
    return sorted(found)


def ema_preview_loras(run_dir: Path) -> list[tuple[int, Path]]:
    """[(step, .safetensors path)] of the EMA weights kept for the newest previewed step no
    checkpoint keeps (samples/<name>-step-N.ema.safetensors with its sidecar:
    training/ema_preview.py; one, or none), oldest step first."""
    folder = run_dir / SAMPLES
    if not folder.is_dir():
        return []
    found = []
    for path in entries(folder):  # gone since the check (a run delete): none
        step = ema_preview_step(run_dir.name, path.name)
        if (
            step is not None
            and path.suffix == ".safetensors"
            and path.is_file()
            and path.with_suffix(".json").is_file()
        ):
            found.append((step, path))
    return sorted(found)


def _sidecar(path: Path) -> dict[str, Any]:
    """The sidecar (.json) beside LoRA `path`, or {} when missing or unreadable."""
    try:
        data = json_read.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def file_weights(sidecar: dict[str, Any] | None) -> str:
    """ "ema" when a LoRA's sidecar says it holds the EMA weights, else "raw" (the trained ones:
    a run without EMA, a snapshot, or an EMA run's <name>.raw.safetensors)."""
    ema = (sidecar or {}).get("ema")
    return "ema" if isinstance(ema, dict) and ema.get("weights") == "ema" else "raw"


def _step_of(sidecar: dict[str, Any]) -> int | None:
    step = sidecar.get("steps")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def run_loras(run_dir: Path) -> list[dict[str, Any]]:
    """Every LoRA of a run by step: the snapshots and (EMA runs) the EMA files its checkpoints
    keep and the newest preview's (a step's raw snapshot before its EMA file), then the final raw <name>.raw.safetensors,
    then the final <name>.safetensors when present (steps from the sidecars). Each {"step",
    "path", "final", "weights": "ema" | "raw"}; steps ascending."""
    found: list[dict[str, Any]] = [
        {"step": step, "path": str(path), "final": False, "weights": file_weights(_sidecar(path))}
        for step, path in list_lora_snapshots(run_dir)
    ]
    found += [
        {"step": step, "path": str(path), "final": False, "weights": "ema"}
        for step, path in ema_step_loras(run_dir) + ema_preview_loras(run_dir)
        if file_weights(_sidecar(path)) == "ema"
    ]
    found.sort(key=lambda row: (row["step"], row["weights"] == "ema"))
    return found + final_loras(run_dir)


def final_loras(run_dir: Path) -> list[dict[str, Any]]:
    """The final rows of `run_loras` alone (the final raw <name>.raw.safetensors of an EMA run,
    then <name>.safetensors; [] without it), read without listing the snapshots and checkpoints:
    the LoRA list asks for these of every run (RELIABILITY 1224)."""
    final = run_dir / f"{run_dir.name}.safetensors"
    if not final.is_file():
        return []
    found = []
    raw = run_dir / f"{run_dir.name}.raw.safetensors"
    sidecar = _sidecar(final)
    if file_weights(sidecar) == "ema" and raw.is_file():
        raw_sidecar = _sidecar(raw)
        if file_weights(raw_sidecar) == "raw":
            found.append({"step": _step_of(raw_sidecar), "path": str(raw), "final": True, "weights": "raw"})
    found.append(
        {"step": _step_of(sidecar), "path": str(final), "final": True, "weights": file_weights(sidecar)}
    )
    return found


def raw_lora_at(run_dir: Path, step: int) -> Path | None:
    """The file holding the raw weights of step `step`: its snapshot, else the final file of that
    step that holds them (an EMA run's <name>.raw.safetensors, a run without EMA's LoRA); None
    when there is none. `run_loras`' first raw row of that step, reading only that step's
    snapshots' sidecars (an EMA run's LoRA list asks this of each: RELIABILITY 1227)."""
    for found, path in list_lora_snapshots(run_dir):  # snapshots first, in run_loras' order
        if found == step and file_weights(_sidecar(path)) == "raw":
            return path
    for row in final_loras(run_dir):  # a checkpoint's EMA step file never holds raw weights
        if row["step"] == step and row["weights"] == "raw":
            return Path(row["path"])
    return None


def ema_lora_at(run_dir: Path, step: int) -> Path | None:
    """The file holding the EMA weights of step `step`: its checkpoint's EMA file, else the
    run's final LoRA when it is of that step and holds them; None when there is none (a run
    without EMA, a step with no checkpoint, or one keep_last removed)."""
    for row in run_loras(run_dir):
        if row["step"] == step and row["weights"] == "ema":
            return Path(row["path"])
    return None


def keep_final_as_snapshot(run_dir: Path) -> Path | None:
    """Copy the run's final LoRA and sidecar to loras/ as the snapshot of its step (before a
    session that trains the run longer overwrites them); with EMA the raw one,
    <name>.raw.safetensors, like every other snapshot (and the file the validation measured).
    Returns the snapshot, or None when there is no final LoRA (or no readable step). An existing
    snapshot of that step is left alone."""
    final = run_dir / f"{run_dir.name}.safetensors"
    raw = run_dir / f"{run_dir.name}.raw.safetensors"
    if file_weights(_sidecar(final)) == "ema" and raw.is_file() and raw.with_suffix(".json").is_file():
        final = raw
    try:
        sidecar = json_read.loads(final.with_suffix(".json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    step = sidecar.get("steps") if isinstance(sidecar, dict) else None
    if not final.is_file() or not isinstance(step, int):
        return None
    name = snapshot_name(run_dir.name, step)
    target = run_dir / LORAS / f"{name}.safetensors"
    if target.is_file():
        return target
    check_folder(run_dir)  # a folder put at the run's path since it started takes nothing (folder_guard.py)
    with writing(f"the LoRA of step {step} could not be kept as a snapshot before the run goes on", target):
        _copy_as_snapshot(final, target, sidecar, name)
    return target


def _copy_as_snapshot(final: Path, target: Path, sidecar: dict[str, Any], name: str) -> None:
    """keep_final_as_snapshot's copy of `final` and its sidecar to `target` (staged, renamed)."""
    target.parent.mkdir(exist_ok=True)
    staged = staging_path(target.parent, ".safetensors")
    staged_json = staging_path(target.parent, ".json")  # as every pair: staged, sidecar renamed first
    check_folder(target.parent)
    try:
        shutil.copyfile(final, staged)
        info = {**sidecar, "snapshot": True, "lora_file": f"{LORAS}/{name}.safetensors"}
        if isinstance(sidecar.get("ema"), dict):  # the raw file's pointer to its EMA twin is stale here
            info["ema"] = {k: v for k, v in sidecar["ema"].items() if k != "ema_file"}
        staged_json.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        check_folder(target.parent)
        replace_in_run(staged_json, target.with_suffix(".json"))
        replace_in_run(staged, target)
    finally:
        staged.unlink(missing_ok=True)
        staged_json.unlink(missing_ok=True)


def remove_snapshot(path: Path) -> None:
    """Remove a snapshot: its LoRA first (it stops being listed), then its sidecar."""
    check_folder(path.parent)  # another's folder at the run's path: nothing of it goes
    path.unlink(missing_ok=True)
    path.with_suffix(".json").unlink(missing_ok=True)


def remove_lone_sidecars(run_dir: Path, before: int) -> None:
    """Remove the snapshot sidecars of steps before `before` whose LoRA is gone (regular files
    only). A snapshot is written sidecar first and removed LoRA first (write_lora_pair,
    remove_snapshot), so a run killed between the two leaves its sidecar, which no listing
    shows and no rotation removed: one more a crash, for good (RELIABILITY 1295). One of a step
    before the snapshot just written is no write in flight."""
    folder = run_dir / LORAS
    if not folder.is_dir() or folder.is_symlink():
        return
    for path in entries(folder):
        step = _step_of_name(path.with_suffix(".safetensors").name) if path.suffix == ".json" else None
        if step is None or step >= before or path.is_symlink() or not path.is_file():
            continue
        if not path.with_suffix(".safetensors").exists():
            check_folder(folder)  # another's folder at the run's path: nothing of it goes
            path.unlink(missing_ok=True)


class SnapshotKeeper:
    """Snapshot bookkeeping of one session of a run (a fresh run, or one resume of it), as
    training/resume/checkpoint.CheckpointKeeper keeps checkpoints.

    `due(step, total)`: whether a `save_lora_every` snapshot falls on `step` (not the last step:
    the final LoRA is the run's result). `record(path)` registers a written snapshot and removes
    this session's oldest beyond `keep` (None: keep all); `finish()` (the session ended well)
    applies `keep` to every snapshot of the folder. The snapshot of step `protected` (the best
    validation round, training/validate.py) is kept besides those. `discard()` removes the
    snapshots this session wrote that the folder did not hold before it: a stop without save of a
    resumed run leaves the folder as it found it (a resume's keep_loras removed the snapshots it
    found, and its discard then left the folder without them: RELIABILITY 1372).
    """

    def __init__(self, run_dir: Path, every: int | None, keep: int | None):
        self.run_dir = run_dir
        self.every = every
        self.keep = keep
        self.written: list[Path] = []
        self.protected: int | None = None  # the step of the best validation round: never removed
        self.preexisting = {path for _, path in list_lora_snapshots(run_dir)}

    def due(self, step: int, total_steps: int) -> bool:
        return self.every is not None and step % self.every == 0 and step < total_steps

    def record(self, path: Path) -> None:
        if path not in self.written:
            self.written.append(path)
        self._prune(include_preexisting=False)
        step = _step_of_name(path.name)
        if self.keep is not None and step is not None:
            remove_lone_sidecars(self.run_dir, before=step)

    def finish(self) -> None:
        self._prune(include_preexisting=True)

    def _prune(self, include_preexisting: bool) -> None:
        if self.keep is None:
            return
        everything = list_lora_snapshots(self.run_dir)
        removable = [old for step, old in everything if step != self.protected]
        for old in removable[: max(0, len(removable) - self.keep)]:
            if include_preexisting or old not in self.preexisting:
                remove_snapshot(old)

    def discard(self) -> None:
        for path in self.written:
            if path not in self.preexisting:
                remove_snapshot(path)
        self.written = []
        folder = self.run_dir / LORAS
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
