"""A run's validation record on disk: <run_dir>/validation.json (no torch: the API reads it).

{"format", "images": held-out file names (each once; "entry label/file" with several entries),
"levels": the fixed noise levels, "series": [{step, loss}], "best": {step, loss}, "last": {step,
loss}}, rewritten (staged, then renamed) after every validation round. `mark_loras` marks the
run's LoRAs with it: each LoRA of a validated step gets its validation loss, and `best` / `last`
flag the LoRAs of the best and of the last round.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lorastudio import json_read
from lorastudio.lora.snapshots import LORAS, snapshot_name
from lorastudio.training.resume.folder_guard import check_folder, replace_in_run
from lorastudio.training.resume.run_files import VALIDATION_FILE, staging_path

if TYPE_CHECKING:
    from lorastudio.training.optimize import RunState
    from lorastudio.training.validate import ValidationRounds

VALIDATION_FORMAT = "lorastudio.validation/1"


def validation_record(
    images: Sequence[str], levels: Sequence[float], series: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """The record of a run's validation so far (best: the lowest loss, the earliest on a tie)."""
    points = [{"step": int(p["step"]), "loss": float(p["loss"])} for p in series]
    finite = [p for p in points if p["loss"] == p["loss"] and abs(p["loss"]) != float("inf")]
    best = min(finite, key=lambda p: (p["loss"], p["step"])) if finite else None
    return {
        "format": VALIDATION_FORMAT,
        "images": list(images),
        "levels": list(levels),
        "series": points,
        "best": best,
        "last": points[-1] if points else None,
    }


def write_validation(run_dir: Path, record: dict[str, Any]) -> Path:
    """Write <run_dir>/validation.json through a staging file in the same folder."""
    target = run_dir / VALIDATION_FILE
    staging = staging_path(run_dir, ".json")
    check_folder(run_dir)  # a folder put at the run's path since it started takes nothing (folder_guard.py)
    try:
        staging.write_text(json.dumps(record, indent=2, allow_nan=False) + "\n", encoding="utf-8")
        check_folder(run_dir)
        replace_in_run(staging, target)
    finally:
        staging.unlink(missing_ok=True)
    return target


def read_validation(run_dir: Path) -> dict[str, Any] | None:
    """The run's validation record, or None when it has none (or it cannot be read)."""
    try:
        record = json_read.loads((run_dir / VALIDATION_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("series"), list) else None


def mark_loras(loras: list[dict[str, Any]], record: dict[str, Any] | None) -> list[dict[str, Any]]:
    """`loras` (lora.snapshots.run_loras rows: {"step", "path", "final", "weights"}) each with
    "validation_loss" (None: its step was not validated) and "best" / "last" (the LoRA of the best /
    the last validation round; the final LoRA when that round was the last step). Validation
    measures the raw weights, so only files holding them are marked: with EMA the final step's
    marks go to <name>.raw.safetensors, never to the EMA LoRA (weights "ema": not measured)."""
    losses = {int(p["step"]): float(p["loss"]) for p in (record or {}).get("series", [])}
    best = ((record or {}).get("best") or {}).get("step")
    last = ((record or {}).get("last") or {}).get("step")
    marked = []
    for row in loras:
        measured = row["step"] is not None and row.get("weights", "raw") == "raw"
        step = row["step"] if measured else None
        marked.append(
            {
                **row,
                "validation_loss": losses.get(step) if step is not None else None,
                "best": best is not None and step == best,
                "last": last is not None and step == last,
            }
        )
    return marked


def validation_summary(state: RunState, validation: ValidationRounds, name: str) -> dict[str, Any]:
    """The final sidecar's "validation": the record (training/validation_file.py) with the file of
    the best and of the last round (a snapshot under loras/, or this LoRA for the last step); the
    losses are those of the raw weights (the ones the snapshots hold), so with EMA the last step's
    file is the raw one, <name>.raw.safetensors (the run's LoRA holds the EMA weights, which were
    not measured)."""
    record = validation.record_of([h.name for h in state.held_out])
    last_file = f"{name}.raw.safetensors" if state.ema is not None else f"{name}.safetensors"
    for key in ("best", "last"):
        point = record[key]
        if point is not None:
            final = point["step"] == state.steps_run
            point["lora"] = (
                last_file if final else f"{LORAS}/{snapshot_name(name, point['step'])}.safetensors"
            )
    record["weights"] = "raw"
    return record
