"""The validation loss of a run (TrainConfig.validation_split / validate_every, issue 29 part 6).

The held-out images (data/holdout.py) are encoded once in phase 2: a centre crop without flip at
their bucket, the VAE posterior MEAN (no latent draw), their full caption (no dropout). Each one
gets its own fixed noise, drawn once from a generator seeded by (validation_seed, VALIDATION_STREAM,
index) (TrainConfig.validation_seed, not the run's `seed`; a run resumed from a checkpoint written
before that setting: its `seed`, identity_rules.validation_noise_seed),
and is measured at the same fixed noise levels, LEVELS: quantiles spread over the schedule (DDPM:
timestep floor(q x T); flow: sigma q, shifted by the family's hook like a sampled one). A round
runs under torch.no_grad() with the denoiser (and so the adapter) in eval mode (no LoRA dropout),
then puts the mode back. Its value is the mean over images and levels of the per-sample MSE times
the objective's weight (the training loss's weighting: min-SNR for DDPM, 1 for flow; a masked
image's pixels weighted by its mask, training/step.py), so it is a
function of the adapter weights alone: comparable across steps, and across runs with the same
validation_seed, held-out images and split (a fraction's images are chosen by `seed`). It draws
from no training stream: a run with validation trains exactly as one without it.

Why hand-written: diffusers' training scripts have no held-out loss; this reuses the engine's own
objective and family hooks so it measures exactly what training optimises.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from lorastudio.training.inputs.latents import stack_controls, variant_controls
from lorastudio.training.resume.folder_guard import check_folder, replace_in_run
from lorastudio.training.resume.run_files import staging_path
from lorastudio.training.speed.compile import run_compiled
from lorastudio.training.step import mask_weights, weighted_loss_share

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.data import ImageItem
    from lorastudio.families.base import Family
    from lorastudio.training.events import Emit
    from lorastudio.training.inputs.conditioning import Conditioning
    from lorastudio.training.noise import DdpmObjective, FlowObjective
    from lorastudio.training.optimize import RunState
    from lorastudio.training.preflight import PreparedRun

LEVELS: tuple[float, ...] = (0.125, 0.375, 0.625, 0.875)  # fixed noise levels (schedule quantiles)
VALIDATION_STREAM = 2929  # the seed stream of the fixed validation noise


@dataclass(frozen=True)
class HeldOut:
    """One encoded validation image: mean [C,h,w] fp32 (CPU), its fixed noise [L,C,h,w] fp32 (one
    per level), controls [N,C,h,w] fp32 or None, and what predict's batch_info needs."""

    name: str
    caption: str
    mean: torch.Tensor
    noise: torch.Tensor
    controls: Any  # [N, C, h, w] fp32, or N slots [C, h_n, w_n] (controls of their own sizes), or None
    original_size: tuple[int, int]
    crop_top_left: tuple[int, int]
    target_size: tuple[int, int]
    mask: torch.Tensor | None = None  # [h, w] fp32 loss mask (data/masks.py), None: unmasked


def fixed_noise(seed: int, index: int, shape: Sequence[int]) -> torch.Tensor:
    """The validation noise of held-out image `index`: [L, *shape] fp32, a pure function of
    (seed, index, shape)."""
    state = np.random.SeedSequence([int(seed), VALIDATION_STREAM, int(index)]).generate_state(1)[0]
    generator = torch.Generator().manual_seed(int(state))
    return torch.randn((len(LEVELS), *shape), generator=generator)  # [L, C, h, w]


def encode_held_out(
    family: Family,
    vae: Any,
    items: Sequence[ImageItem],
    seed: int,
    device: torch.device,
    area: int | None = None,
    labels: Sequence[str] = (),
) -> list[HeldOut]:
    """Encode the held-out `items` (see the module docstring; `area`: the int
    control_resolution's, training.inputs.latents.encode_controls; `labels`: the entries naming them,
    data.items.item_name). Draws from no run stream."""
    from lorastudio.data import load_crop
    from lorastudio.data.items import item_name
    from lorastudio.training.inputs.conditioning import item_key
    from lorastudio.training.inputs.latents import crop_masks, encode_controls

    still = np.random.default_rng(0)  # a centre crop draws nothing; load_crop wants a generator
    encoded = []
    for index, item in enumerate(items):
        crop = load_crop(item, random_crop=False, flip=False, rng=still)
        pixels = torch.from_numpy(crop.pixels[None]).to(device)  # [1, 3, H, W]
        with torch.no_grad():
            mean, _ = family.encode_pixels(vae, pixels)  # [1, C, h, w] fp32
            controls = encode_controls(
                family, vae, item, [crop], [False], device, area
            )  # [1, N, C, h, w] | None
        mean = mean[0].detach().float().cpu()  # [C, h, w]
        masks = crop_masks(item, [crop], [False], family.spec.vae_scale_factor)  # [1, h, w] | None
        encoded.append(
            HeldOut(
                name=item_name(item, labels),
                caption=item_key(
                    family, item
                ),  # the conditioning key (caption + controls where the prompt sees them)
                mean=mean,
                noise=fixed_noise(seed, index, mean.shape),
                controls=None if controls is None else variant_controls(controls, 0),
                original_size=crop.original_size,
                crop_top_left=crop.crop_top_left,
                target_size=(int(crop.pixels.shape[1]), int(crop.pixels.shape[2])),
                mask=None if masks is None else masks[0],
            )
        )
    return encoded


def validation_loss(
    family: Family,
    denoiser: Any,
    objective: DdpmObjective | FlowObjective,
    held_out: Sequence[HeldOut],
    conds: Conditioning,
    cfg: TrainConfig,
    *,
    dtype: torch.dtype,
    device: torch.device,
    chunk: int = len(LEVELS),
) -> float:
    """The mean validation loss of the adapter as it is now (see the module docstring): every
    held-out image at every level, `chunk` levels per forward. Leaves the denoiser's mode, weights
    and gradients as they were."""
    was_training = bool(getattr(denoiser, "training", True))
    denoiser.eval()
    total = torch.zeros((), dtype=torch.float64, device=device)  # [] summed on the device
    levels = torch.tensor(LEVELS, dtype=torch.float32)  # [L]
    try:
        with torch.no_grad():
            for item in held_out:
                for start in range(0, len(LEVELS), max(1, chunk)):
                    part = slice(start, min(start + max(1, chunk), len(LEVELS)))
                    total += _chunk_loss(
                        family, denoiser, objective, item, conds, cfg, levels[part], part, dtype, device
                    )
    finally:
        denoiser.train(was_training)
    return float(total) / (len(held_out) * len(LEVELS))


def _chunk_loss(
    family: Family,
    denoiser: Any,
    objective: DdpmObjective | FlowObjective,
    item: HeldOut,
    conds: Conditioning,
    cfg: TrainConfig,
    levels: torch.Tensor,
    part: slice,
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    """Sum over `levels` [B] of one held-out image's weighted MSE: [] fp64 on the device."""
    b = int(levels.shape[0])
    latents = (
        item.mean.unsqueeze(0).expand(b, *item.mean.shape).to(device=device, dtype=dtype)
    )  # [B, C, h, w]
    noised = objective.at_levels(latents, levels, item.noise[part])
    info: dict[str, Any] = {
        "original_size": [item.original_size] * b,
        "crop_top_left": [item.crop_top_left] * b,
        "target_size": item.target_size,
    }
    if item.controls is not None:
        info["controls"] = stack_controls([item.controls] * b, device, dtype)  # [B, N, C, h, w] or slots
    cond = family.collate_conditioning([conds[item.caption]] * b)

    mask = None if item.mask is None else item.mask.expand(b, 1, *item.mask.shape)  # [B, 1, h, w]
    pixel_weight = mask_weights(None if mask is None else mask.to(device), cfg.unmasked_weight)

    def forward() -> torch.Tensor:
        pred = family.predict(denoiser, noised.noisy, noised.noise_level, cond, info, cfg)  # [B, C, h, w]
        return weighted_loss_share(
            pred, noised.target, noised.weight, 1, "mse", None, pixel_weight
        ).double()  # [] summed: the MSE whatever the run's loss

    return run_compiled(denoiser, forward)


class ValidationRounds:
    """When a run validates and what it found: `due(step, total)` every `every` steps and at the
    last step; `record(step, loss)` keeps the series, `best` the lowest point. The series is
    saved in checkpoints (a resumed run continues it: `restore`). `discard()` puts the run
    folder's validation.json back as this session found it (a resumed run stopped without save)."""

    def __init__(self, every: int | None, run_dir: Path | None = None):
        from lorastudio.training.resume.run_files import VALIDATION_FILE

        self.every = every
        self.series: list[dict[str, float | int]] = []
        self._file = None if run_dir is None else run_dir / VALIDATION_FILE
        self._before = self._file.read_bytes() if self._file is not None and self._file.is_file() else None

    def discard(self) -> None:
        """Restore validation.json as it was when the session started (remove it if it had none)."""
        if self._file is None:
            return
        check_folder(self._file.parent)  # another's folder at the run's path keeps its record
        if self._before is None:
            self._file.unlink(missing_ok=True)
        else:
            staging = staging_path(self._file.parent, ".json")
            staging.write_bytes(self._before)
            replace_in_run(staging, self._file)

    def due(self, step: int, total_steps: int) -> bool:
        return step >= total_steps or (self.every is not None and step % self.every == 0)

    def record(self, step: int, loss: float) -> None:
        self.series = [p for p in self.series if p["step"] != step] + [{"step": step, "loss": loss}]

    def restore(self, series: Sequence[dict[str, Any]], up_to: int) -> None:
        """The checkpoint's series (points after `up_to` dropped)."""
        self.series = [
            {"step": int(p["step"]), "loss": float(p["loss"])} for p in series if int(p["step"]) <= up_to
        ]

    @property
    def best(self) -> dict[str, float | int] | None:
        finite = [p for p in self.series if np.isfinite(p["loss"])]
        return min(finite, key=lambda p: (p["loss"], p["step"])) if finite else None

    @property
    def last(self) -> dict[str, float | int] | None:
        return self.series[-1] if self.series else None

    def record_of(self, images: Sequence[str]) -> dict[str, Any]:
        """The run's validation record (training/validation_file.py) for held-out `images`
        (each name once: an image held at several resolutions is one image)."""
        from lorastudio.training.validation_file import validation_record

        return validation_record(list(dict.fromkeys(images)), LEVELS, self.series)


def validation_round(
    run: PreparedRun, state: RunState, objective: DdpmObjective | FlowObjective, step: int, emit: Emit
) -> None:
    """The validation round after optimizer step `step` (the weights the LoRA snapshots hold: the
    raw ones, with EMA too): measure, record, emit Validated; rank 0 then rewrites
    validation.json and writes the LoRA snapshot of the step (not after the last step: the run's
    final LoRA is that one), keeping the best round's snapshot from keep_loras."""
    from lorastudio.training.adapters.export import save_lora_snapshot
    from lorastudio.training.events import Validated
    from lorastudio.training.validation_file import write_validation

    rounds = state.validation
    if rounds is None or not state.held_out:
        return
    micro = state.plan.micro_batch_size if state.plan is not None else len(LEVELS)
    loss = validation_loss(
        run.family, state.denoiser, objective, state.held_out, state.held_out_conds, run.cfg,
        dtype=run.dtype, device=run.device, chunk=micro,
    )  # fmt: skip
    rounds.record(step, loss)
    best = rounds.best or {"step": step, "loss": loss}
    emit(
        Validated(
            step=step,
            loss=loss,
            images=len({h.name for h in state.held_out}),  # an image at several sides once
            best_step=int(best["step"]),
            best_loss=float(best["loss"]),
        )
    )
    if not state.ctx.is_main:
        return
    write_validation(run.run_dir, rounds.record_of([h.name for h in state.held_out]))
    if state.loras is not None:
        state.loras.protected = int(best["step"])
    if step < state.total_steps:
        path = save_lora_snapshot(
            run, state.denoiser, state.lora_config, step=step, total_steps=state.total_steps,
            extensions=state.extensions, validation={"step": step, "loss": loss},
            text_encoders=state.text_encoders,
        )  # fmt: skip
        if path is not None and state.loras is not None:
            state.loras.record(path)
