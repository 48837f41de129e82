"""Training a run longer: a resume that sets `steps` above the run's total (no torch here).

    lorastudio train --resume RUN --set steps=N        POST /api/runs/{id}/resume {"settings": {"steps": N}}

Rules:
- N must exceed the checkpoint's total steps, and the run must count steps (num_epochs = 0).
- The run continues from its newest (or the chosen) checkpoint with every stream restored, and
  from there it is the run a fresh N-step run would be: the LR at every step t > the checkpoint's
  is the N-step schedule's value at t (`constant` and the warmup part: unchanged; `linear`,
  `cosine`, `polynomial`, `cosine_with_restarts` re-span 1..N, so where the old schedule had
  decayed the LR goes back up to the N-step curve). With `constant` (the default) an extended
  run equals a run trained for N steps from the start (loss curve and LoRA).
- The extension is recorded: checkpoints and sidecars carry "extensions": [{"from_steps",
  "to_steps", "resumed_at_step", "at"}], one per extension. The final LoRA of the old total is
  kept as the snapshot of its step (loras/<name>-step-N); snapshots already on disk are not
  rewritten by the steps the extension re-runs.
- A finished run (its sidecar says stopped = false) resumed without a larger N is refused: the
  resume would re-run its last steps and overwrite its LoRA.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lorastudio import json_read
from lorastudio.errors import ConfigError, FieldProblem

EXTENSIONS_KEY = "extensions"  # identity.json and sidecar: the record of each extension


def extension_steps(info: Mapping[str, Any], overrides: Mapping[str, Any]) -> int | None:
    """The new total N when `overrides` sets `steps` for a resume from a checkpoint described by
    `info` (read_checkpoint_info); None when it does not. Raises ConfigError (field "steps") when
    N is not an integer above the checkpoint's total or the run counts epochs."""
    if "steps" not in overrides:
        return None
    steps, total = overrides["steps"], int(info["total_steps"])
    if isinstance(steps, bool) or not isinstance(steps, int):
        raise ConfigError([FieldProblem("steps", f"must be an integer, not {steps!r}")])
    if int(info["config"].get("num_epochs") or 0) > 0:
        raise ConfigError(
            [
                FieldProblem(
                    "steps", "this run counts epochs (num_epochs); only a run of steps can be extended"
                )
            ]
        )
    if steps <= total:
        raise ConfigError(
            [FieldProblem("steps", f"the run has {total} steps: to train it longer, set steps above {total}")]
        )
    return steps


def finished_problem(run_dir: Path, extended: bool) -> FieldProblem | None:
    """A resume of a finished run (its final sidecar says stopped = false) that does not extend
    it: the problem to report, else None."""
    if extended:
        return None
    try:
        sidecar = json_read.loads((run_dir / f"{run_dir.name}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(sidecar, dict) or sidecar.get("stopped") is not False:
        return None
    steps = sidecar.get("steps")
    return FieldProblem(
        "resume",
        f"{run_dir.name} finished at step {steps} of {sidecar.get('total_steps')}: resuming would re-run its "
        f"last steps and overwrite its LoRA; to train it longer set steps above {steps} "
        '(CLI: --set steps=N; API: {"settings": {"steps": N}}; UI: "Train longer")',
    )


def extension_record(info: Mapping[str, Any], new_total: int | None) -> list[dict[str, Any]]:
    """The extensions of a session resumed from `info`: the checkpoint's own, plus this one when
    `new_total` is set."""
    record = [dict(e) for e in info.get(EXTENSIONS_KEY, []) if isinstance(e, Mapping)]
    if new_total is not None:
        record.append(
            {
                "from_steps": int(info["total_steps"]),
                "to_steps": new_total,
                "resumed_at_step": int(info["step"]),
                "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            }
        )
    return record


def respan_schedule(scheduler: Any) -> None:
    """After a checkpoint's state was loaded into a LambdaLR built for the new total: set every
    param group's LR (and get_last_lr) to the new schedule's value at the restored step, as a
    fresh run of the new total would have it (the loaded optimizer holds the old schedule's)."""
    step = scheduler.last_epoch
    lrs = [base * fn(step) for base, fn in zip(scheduler.base_lrs, scheduler.lr_lambdas, strict=True)]
    for group, lr in zip(scheduler.optimizer.param_groups, lrs, strict=True):
        group["lr"] = lr
    scheduler._last_lr = lrs
