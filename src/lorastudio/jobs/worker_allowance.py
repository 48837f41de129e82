"""How long the generation and caption workers may take before they count as hung (no torch,
no HTTP).

A worker that stays alive but never answers (a driver or library deadlock, a stalled download, a
debugger stop) would hold a request, the GPU arbiter or a dataset claim for ever. Each wait on a
worker therefore has a deadline derived from what was asked for.

Generation (GenerationAllowance, jobs/generation_process.py):
- starting: `ready_s` until the spawned child says "ready" (it does before importing anything
  heavy);
- loading: `load_s` from the job's send until the worker reports the job's pipeline ready (at
  once when it is resident; a hub id may be fetched here);
- generating: `fixed_s + step_s x steps x max(1, megapixels) x images` from there: LoRAs, text
  encoding, the denoising steps, the VAE decode and the PNG write.
Past a deadline the worker is stopped, SIGTERM then SIGKILL after `kill_grace_s`, and the request
gets GenerationTimedOut (HTTP 504).

Captioning (CaptionAllowance, jobs/captioning.py): `load_s` until the worker reports the model
loaded ("caption_started"), then `image_s` for each image (any event counts); past it the worker
is stopped the same way and the job fails, freeing its dataset claim and the GPU.

The defaults are generous for a slow GPU with offloading (30 s per generation step of one
megapixel, where an H200 takes ~0.3 s; 10 min per caption); a slower machine (CPU generation of a
full-size model) raises every allowance with the setting `worker_timeout_scale`
(LORASTUDIO_WORKER_TIMEOUT_SCALE, a factor).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

READY_S = 120.0
LOAD_S = 1800.0
FIXED_S = 120.0
STEP_S = 30.0
KILL_GRACE_S = 5.0
SCALE_SETTING = "LORASTUDIO_WORKER_TIMEOUT_SCALE"


@dataclass(frozen=True)
class GenerationAllowance:
    """Seconds the generation worker may take for each phase (see the module docstring)."""

    ready_s: float = READY_S
    load_s: float = LOAD_S
    fixed_s: float = FIXED_S
    step_s: float = STEP_S  # per denoising step of one megapixel (smaller images count as one)
    kill_grace_s: float = KILL_GRACE_S  # after SIGTERM, before SIGKILL (not scaled)

    def scaled(self, factor: float) -> GenerationAllowance:
        """Every phase's allowance times `factor` (the kill grace stays)."""
        return replace(
            self,
            ready_s=self.ready_s * factor,
            load_s=self.load_s * factor,
            fixed_s=self.fixed_s * factor,
            step_s=self.step_s * factor,
        )

    def work_s(self, steps: int, width: int, height: int, images: int = 1) -> float:
        """The allowance for generating `images` images of width x height in `steps` steps with
        the pipeline loaded."""
        megapixels = max(1.0, width * height / 1e6)
        return self.fixed_s + self.step_s * steps * megapixels * images


CAPTION_LOAD_S = 1800.0
CAPTION_IMAGE_S = 600.0


@dataclass(frozen=True)
class CaptionAllowance:
    """Seconds a caption worker may stay silent: until its model is loaded, then per image."""

    load_s: float = CAPTION_LOAD_S
    image_s: float = CAPTION_IMAGE_S
    kill_grace_s: float = KILL_GRACE_S  # after SIGTERM, before SIGKILL (not scaled)

    def scaled(self, factor: float) -> CaptionAllowance:
        """Both allowances times `factor` (the kill grace stays)."""
        return replace(self, load_s=self.load_s * factor, image_s=self.image_s * factor)


def seconds_words(seconds: float) -> str:
    """A duration for a message: whole seconds from 10 s, tenths below."""
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"


def work_words(steps: int, width: int, height: int) -> str:
    """What a generation asked for, for a timeout message ("20 steps at 1024x1024")."""
    return f"{steps} step{'s' if steps != 1 else ''} at {width}x{height}"


def timed_out_message(what: str, seconds: float, how: str) -> str:
    """The message of GenerationTimedOut: what timed out, after how long, how the worker was
    stopped (`how`: "SIGTERM", ...), and what to do."""
    return (
        f"the generation worker did not {what} within {seconds_words(seconds)} and was stopped as hung"
        f" ({how}); the next request starts a fresh worker (on a slow machine raise {SCALE_SETTING})"
    )
