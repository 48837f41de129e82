"""A worker target for the plan tests, in a module of its own: the spawned child imports the
target's module, and this one needs neither torch nor diffusers (test_api_plan.py needs both), so
the child starts in about a second."""

from __future__ import annotations

import math
from typing import Any

from lorastudio.jobs.worker import WorkerArgs, WorkerChannel, prepare_child
from lorastudio.training.events import (
    Complete,
    DatasetWarnings,
    ModelLoadStarted,
    PlanChosen,
    PlanTrial,
    Progress,
)

_SELECTIVE = {
    "base_precision": "bf16",
    "gradient_checkpointing": "selective",
    "offload_blocks": 0,
    "micro_batch_size": 1,
}
MEASURED = PlanChosen(
    **_SELECTIVE,
    compile=False,
    memory_budget_gb=20.0,
    decided_by="measured",
    trials=[
        PlanTrial(
            **{**_SELECTIVE, "gradient_checkpointing": "off", "micro_batch_size": 2},
            seconds_per_sample=None,
            peak_memory_gb=None,
            fits=False,
            note="out of memory",
        ),
        # non-finite numbers reach the record as null
        PlanTrial(**_SELECTIVE, seconds_per_sample=math.inf, peak_memory_gb=17.5, fits=True),
    ],
    fallbacks=["compile: the compiler failed on this block (eager)"],
)


def report_a_measured_plan(args: WorkerArgs, events: Any, stop_event: Any, stop_save: Any) -> None:
    """Worker target: the engine's events of a run whose plan a memory budget chose, one step."""
    prepare_child(args)
    channel = WorkerChannel(args, events, stop_event, stop_save)
    channel.emit(ModelLoadStarted(component="denoiser"))
    channel.emit(MEASURED)
    channel.emit(
        Progress(
            step=1,
            total_steps=1,
            epoch=1,
            loss=0.5,
            avg_loss=0.5,
            lr=1e-4,
            grad_norm=0.1,
            samples_per_second=None,
            peak_memory_gb=None,
        )
    )
    channel.emit(Complete(lora_path=None, steps_run=1, stopped=False))
    channel.close()


SAID = [
    "2 image(s) are cut by more than 20% to the crop of their bucket: a.png (33% cut), b.png (33% cut)",
    "1 validation image(s) are also training images: again.png (= a.png)",
]


def report_dataset_warnings(args: WorkerArgs, events: Any, stop_event: Any, stop_save: Any) -> None:
    """Worker target: a run whose preflight warned about its dataset (DatasetWarnings)."""
    prepare_child(args)
    channel = WorkerChannel(args, events, stop_event, stop_save)
    channel.emit(DatasetWarnings(warnings=SAID))
    channel.emit(ModelLoadStarted(component="denoiser"))
    channel.emit(Complete(lora_path=None, steps_run=0, stopped=False))
    channel.close()
