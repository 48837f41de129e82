"""The end of the optimizer loop (training/optimize.py) and its sample rounds: after the last
step (and its validation round), the run's LoRA (written before the final samples, so a kill or
a failure while they render keeps every trained step), then the final sample round."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from lorastudio.training.events import Emit, SampleReady

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.training.latents import LatentSource
    from lorastudio.training.optimize import RunState
    from lorastudio.training.preflight import PreparedRun
    from lorastudio.training.snapshot import LoopParts


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
    round can take minutes on a large model; the last checkpoint may be many steps back)."""
    step = state.steps_run
    if state.final_save is not None:
        state.final_save()
    if state.previews is not None and state.previews.due(step, state.total_steps):
        sample_round(run.cfg, state, parts, source, step, emit)


def sample_round(
    cfg: TrainConfig, state: RunState, parts: LoopParts, source: LatentSource, step: int, emit: Emit
) -> None:
    """Render the sample prompts with the live LoRA at `step` and announce them (SampleReady)."""
    assert state.previews is not None
    with sample_weights(parts, cfg):
        images = state.previews.render(state.denoiser, step, vae=getattr(source, "vae", None))
    emit(SampleReady(step=step, images=images))


def sample_weights(parts: LoopParts, cfg: TrainConfig) -> contextlib.AbstractContextManager[None]:
    """The adapter weights a sample round renders: the EMA ones (cfg.sample_with_ema) or the raw."""
    if parts.ema is not None and cfg.sample_with_ema:
        return parts.ema.swapped_in()
    return contextlib.nullcontext()
