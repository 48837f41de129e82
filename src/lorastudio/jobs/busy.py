"""Work in flight that a stop must wait for: a sample round, a checkpoint, the LoRA's save.

The engine checks for a stop between steps, so a stop-and-save requested during a sample round
or a checkpoint write is honoured only once that work is done, and then the checkpoint and LoRA
of the stop are written too. A fixed grace (Timeouts.stop_grace_s) lost a LoRA once: a slow
sample round ran past it and the worker was terminated before it could save. So:

- the worker (its event channel, `BusyTracker`) reports the work it is about to do as a "busy"
  message, {"type": "busy", "work": "sample round" | "checkpoint" | ..., "step": N}, and
  {"type": "busy", "work": null} when the engine is back at its stop check. What is due after a
  step follows from the config exactly as the engine decides it (training/samples.py
  SamplePreviews.due, training/resume/checkpoint.py CheckpointKeeper.due); a stop-and-save the engine
  takes is reported as "saving the checkpoint and LoRA" until the run ends;
- the job service (`stop_deadline`) terminates a stopping worker only after stop_grace_s
  counted from the end of that work, and never before busy_grace_s (the upper bound, for work
  that hangs) while work is in flight. The job's snapshot shows the work ("busy").

These messages are the job service's, not engine events (training/events.py is unchanged).
No torch here.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from lorastudio.config import TrainConfig
from lorastudio.training.events import Event, Progress, SampleReady, StopRequest, Validated

BUSY = "busy"
SAMPLE_ROUND = "sample round"
VALIDATION_ROUND = "validation round"
CHECKPOINT = "checkpoint"
FINAL_SAVE = "saving the LoRA"
STOP_SAVE = "saving the checkpoint and LoRA of the stop"


class WorkerBusy(BaseModel):
    """The busy message as the service parses it (work None: nothing in flight)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["busy"] = "busy"
    work: str | None
    step: int | None = None


class BusyTracker:
    """The worker's side: turns what the engine emits and polls into busy messages."""

    def __init__(self, config: TrainConfig):
        self._prompts = bool(config.sample_prompts)
        self._sample_every = config.sample_every
        self._save_every = config.save_every
        self._validates = config.validation_split is not None
        self._validate_every = config.validate_every
        self.work: str | None = None
        self._pending: list[str] = []

    def after_event(self, event: Event) -> dict[str, Any] | None:
        """The busy message to send after `event` (None: none)."""
        if isinstance(event, Progress):
            self._pending = self._due(event.step, event.total_steps)
            return self._set(" + ".join(self._pending) or None, event.step) if self._pending else None
        for kind, work in ((SampleReady, SAMPLE_ROUND), (Validated, VALIDATION_ROUND)):
            if isinstance(event, kind) and work in self._pending:
                self._pending = [w for w in self._pending if w != work]
                return self._set(" + ".join(self._pending) or None, event.step)
        return None

    def after_poll(self, request: StopRequest | None) -> dict[str, Any] | None:
        """The busy message to send after the engine's stop check returned `request`."""
        self._pending = []
        if request is not None and request.save:
            return self._set(STOP_SAVE, None)
        if request is None and self.work is not None:
            return self._set(None, None)
        return None

    def _due(self, step: int, total: int) -> list[str]:
        work = []
        if self._prompts and (
            step >= total or (self._sample_every is not None and step % self._sample_every == 0)
        ):
            work.append(SAMPLE_ROUND)
        if self._validates and (
            step >= total or (self._validate_every is not None and step % self._validate_every == 0)
        ):
            work.append(VALIDATION_ROUND)
        if self._save_every is not None and step % self._save_every == 0 and step < total:
            work.append(CHECKPOINT)
        if step >= total:
            work.append(FINAL_SAVE)
        return work

    def _set(self, work: str | None, step: int | None) -> dict[str, Any] | None:
        if work == self.work:
            return None
        self.work = work
        return WorkerBusy(work=work, step=step).model_dump()


def stop_deadline(
    stop_at: float | None, busy: dict[str, Any] | None, busy_changed_at: float | None, timeouts: Any
) -> float | None:
    """Monotonic time after which a stopping worker is terminated (None: no stop requested):
    stop_grace_s after the stop request or after the end of the work in flight, whichever is
    later; while work is in flight, not before busy_grace_s after the request."""
    if stop_at is None:
        return None
    if busy is not None:
        return stop_at + max(timeouts.busy_grace_s, timeouts.stop_grace_s)
    return max(stop_at, busy_changed_at or stop_at) + timeouts.stop_grace_s


def stop_conflict(job_id: str, saving: bool) -> str:
    """Why a stop asking the other way than the pending one (`saving`) of job `job_id` is
    refused (JobService.stop): the worker may have read the first already."""
    if saving:
        return (
            f"a stop-and-save of run {job_id} was already asked for (another tab or client): it ends "
            "with a LoRA of the steps run; delete the run afterwards to discard it"
        )
    return (
        f"a stop without saving of run {job_id} was already asked for (another tab or client): it "
        "ends without a LoRA"
    )
