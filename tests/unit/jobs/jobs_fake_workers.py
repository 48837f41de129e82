"""Worker targets that misbehave on purpose, for the job-service edges a real engine cannot be
made to produce on demand. Each runs in a real spawned child with the real preparation
(parent binding, secret scrubbing) and the real event channel; only the engine is replaced."""

from __future__ import annotations

import math
import os
import signal
import time
from typing import Any

from lorastudio.jobs.childenv import is_secret
from lorastudio.jobs.worker import WorkerArgs, WorkerChannel, prepare_child
from lorastudio.training.events import Complete, Error, ModelLoadStarted, Progress, SampleReady


def _progress(step: int, loss: float, lr: float = 1e-4, grad_norm: float | None = 0.5) -> Progress:
    return Progress(
        step=step,
        total_steps=3,
        epoch=1,
        loss=loss,
        avg_loss=loss,
        lr=lr,
        grad_norm=grad_norm,
        samples_per_second=None,
        peak_memory_gb=None,
    )


def hang_ignoring_stop(args: WorkerArgs, events: Any, stop_event: Any, stop_save: Any) -> None:
    """Starts 'loading' and never looks at the stop flag; ignores SIGTERM too."""
    prepare_child(args)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    channel = WorkerChannel(args, events, stop_event, stop_save)
    channel.emit(ModelLoadStarted(component="text_encoders"))
    while True:
        time.sleep(0.1)


def die_after_one_step(args: WorkerArgs, events: Any, stop_event: Any, stop_save: Any) -> None:
    """One step, then the process vanishes without a terminal event."""
    prepare_child(args)
    channel = WorkerChannel(args, events, stop_event, stop_save)
    channel.emit(_progress(1, 0.5))
    channel.close()
    os._exit(7)


def emit_non_finite(args: WorkerArgs, events: Any, stop_event: Any, stop_save: Any) -> None:
    """NaN / Inf in every numeric field of a step, then a finite step, then completion."""
    prepare_child(args)
    channel = WorkerChannel(args, events, stop_event, stop_save)
    channel.emit(_progress(1, math.nan, lr=math.inf, grad_norm=-math.inf))
    channel.emit(_progress(2, 0.25))
    channel.emit(Complete(lora_path=None, steps_run=2, stopped=False))
    channel.close()


def emit_as_superseded_worker(args: WorkerArgs, events: Any, stop_event: Any, stop_save: Any) -> None:
    """Events tagged with another generation (a superseded process) must be ignored."""
    prepare_child(args)
    events.put((args.generation + 1, os.getpid(), Error(message="from a stale worker").model_dump()))
    events.put((args.generation, os.getpid() + 1, Error(message="from a foreign pid").model_dump()))
    channel = WorkerChannel(args, events, stop_event, stop_save)
    channel.emit(_progress(1, 0.5))
    channel.emit(Complete(lora_path=None, steps_run=1, stopped=False))
    channel.close()


def report_environment(args: WorkerArgs, events: Any, stop_event: Any, stop_save: Any) -> None:
    """Fails with the names of the secret-looking variables it can see."""
    prepare_child(args)
    channel = WorkerChannel(args, events, stop_event, stop_save)
    seen = sorted(k for k in os.environ if is_secret(k))
    token = args.settings.api_token
    channel.emit(Error(message=f"env={','.join(seen)} settings_token={token}"))
    channel.close()


LINGER_S = 1.5  # how long `complete_then_linger` keeps its process alive after completing


def complete_then_linger(args: WorkerArgs, events: Any, stop_event: Any, stop_save: Any) -> None:
    """One step, completion, then a slow exit (like a worker freeing a large model)."""
    prepare_child(args)
    channel = WorkerChannel(args, events, stop_event, stop_save)
    channel.emit(_progress(1, 0.5))
    channel.emit(Complete(lora_path=None, steps_run=1, stopped=False))
    channel.close()
    time.sleep(LINGER_S)


def step_with_peak_then_wait(args: WorkerArgs, events: Any, stop_event: Any, stop_save: Any) -> None:
    """One step reporting a 12.5 GiB peak, then waits for a stop (a run holding the GPU)."""
    prepare_child(args)
    channel = WorkerChannel(args, events, stop_event, stop_save)
    channel.emit(_progress(1, 0.5).model_copy(update={"peak_memory_gb": 12.5}))
    while not stop_event.wait(0.05):
        pass
    channel.emit(Complete(lora_path=None, steps_run=1, stopped=True))
    channel.close()


STEP_GAP_S = 0.05  # the steps of the fakes below: the slowest step the hang allowance sees
SILENT_S = 2.5  # their silence: past a test's allowance of 1 s


def steps_then_hang_ignoring_stop(args: WorkerArgs, events: Any, stop_event: Any, stop_save: Any) -> None:
    """Two steps, then silence for ever: the stop flag and SIGTERM ignored (a deadlocked step)."""
    prepare_child(args)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    channel = WorkerChannel(args, events, stop_event, stop_save)
    for step in (1, 2):
        channel.emit(_progress(step, 0.5))
        time.sleep(STEP_GAP_S)
    while True:
        time.sleep(0.1)


def steps_then_slow_step_saving_on_stop(
    args: WorkerArgs, events: Any, stop_event: Any, stop_save: Any
) -> None:
    """Two steps, then one very slow step that ends at the stop request, saving (stopped)."""
    prepare_child(args)
    channel = WorkerChannel(args, events, stop_event, stop_save)
    for step in (1, 2):
        channel.emit(_progress(step, 0.5))
        time.sleep(STEP_GAP_S)
    while not stop_event.wait(0.05):
        pass
    channel.emit(Complete(lora_path=None, steps_run=2, stopped=bool(stop_save.value)))
    channel.close()


def steps_with_a_silent_sample_round(args: WorkerArgs, events: Any, stop_event: Any, stop_save: Any) -> None:
    """Three steps; the sample round announced after step 2 (the config samples every 2 steps)
    stays silent for SILENT_S, then the run completes."""
    prepare_child(args)
    channel = WorkerChannel(args, events, stop_event, stop_save)
    channel.emit(_progress(1, 0.5))
    time.sleep(STEP_GAP_S)
    channel.emit(_progress(2, 0.5))  # the channel announces the sample round (jobs/busy.py)
    time.sleep(SILENT_S)
    channel.emit(SampleReady(step=2, images=[]))
    channel.emit(_progress(3, 0.5))
    channel.emit(Complete(lora_path=None, steps_run=3, stopped=False))
    channel.close()


BURST_STEPS = 2000  # the most steps `burst_of_steps` runs before it waits (the event log keeps 5000)


def burst_of_steps(args: WorkerArgs, events: Any, stop_event: Any, stop_save: Any) -> None:
    """Steps 5 ms apart, a sample round every 10th, until a stop (or BURST_STEPS, then it waits
    for the stop): a run the status snapshot is read against while its events pour in."""
    prepare_child(args)
    channel = WorkerChannel(args, events, stop_event, stop_save)
    step = 0
    while not stop_event.is_set() and step < BURST_STEPS:
        step += 1
        channel.emit(_progress(step, 1.0 / step).model_copy(update={"total_steps": BURST_STEPS}))
        if step % 10 == 0:
            channel.emit(SampleReady(step=step, images=[f"samples/step-{step:06d}-0.png"]))
        time.sleep(0.005)
    while not stop_event.wait(0.05):
        pass
    channel.emit(Complete(lora_path=None, steps_run=step, stopped=True))
    channel.close()
