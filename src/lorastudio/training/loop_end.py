"""The end of the optimizer loop (training/optimize.py) and its sample rounds: after the last
step (and its validation round), the run's LoRA (written before the final samples, so a kill or
a failure while they render keeps every trained step), then the final sample round."""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from lorastudio.errors import TrainingStopped
from lorastudio.training.events import Emit, RunWarning, SampleReady

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.training.inputs.latents import LatentSource
    from lorastudio.training.optimize import RunState
    from lorastudio.training.preflight import PreparedRun
    from lorastudio.training.resume.snapshot import LoopParts
    from lorastudio.training.samples import SamplePreviews

log = logging.getLogger("lorastudio.training")


def finish_run(
    run: PreparedRun,
    state: RunState,
    parts: LoopParts,
    source: LatentSource,
    emit: Emit,
) -> None:
    """After the last step and its validation round (the final sidecar records it): the run's
    LoRA and sidecars (state.final_save), then the final sample round. The LoRA comes before the
    samples so that a kill or a failure while they render keeps every trained step (a sample
    round can take minutes on a large model; the last checkpoint may be many steps back).

    A failure of that round once the LoRA is written (any Exception but a stop request) does not
    fail the run: its result is whole. It is logged and announced as a RunWarning, and the run
    completes without those samples (the record keeps the warning). An interrupt (Ctrl-C twice,
    SystemExit) still ends the run where it is."""
    step = state.steps_run
    if state.final_save is not None:
        state.final_save()
    if state.previews is None or not state.previews.due(step, state.total_steps):
        return
    try:
        sample_round(run.cfg, state.previews, state, parts, source, step, emit)
    except TrainingStopped:
        raise
    except Exception as err:
        if state.final_lora is None:  # nothing whole to keep: the run failed
            raise
        why = f"{type(err).__name__}: {err}"
        log.warning("the final sample round of step %d failed (%s); the run's LoRA is kept", step, why)
        emit(
            RunWarning(
                step=step,
                message=f"the final sample round (step {step}) failed: {why}; the run's LoRA is "
                "complete and kept, without those samples",
            )
        )


def sample_round(
    cfg: TrainConfig,
    previews: SamplePreviews,
    state: RunState,
    parts: LoopParts,
    source: LatentSource,
    step: int,
    emit: Emit,
) -> None:
    """Render the sample prompts (`previews`) with the live LoRA at `step` and announce them
    (SampleReady); each prompt whose image was not finite (no file) is logged and announced as a
    RunWarning: the run goes on (RELIABILITY 1651)."""
    with sample_weights(parts, cfg):
        images = previews.render(state.denoiser, step, vae=getattr(source, "vae", None))
    for failure in previews.failures:
        log.warning("%s", failure)
        emit(RunWarning(step=step, message=failure))
    emit(SampleReady(step=step, images=images))


def sample_weights(parts: LoopParts, cfg: TrainConfig) -> contextlib.AbstractContextManager[None]:
    """The adapter weights a sample round renders: the EMA ones (cfg.sample_with_ema) or the raw."""
    if parts.ema is not None and cfg.sample_with_ema:
        return parts.ema.swapped_in()
    return contextlib.nullcontext()
