"""An EMA run's preview weights kept where no checkpoint keeps them (RELIABILITY 1492).

A preview of an EMA run (ema_decay with sample_with_ema, the default) renders the EMA weights of
its step; a checkpoint of that step keeps them (RELIABILITY 812), the final LoRA the last step's.
A preview of a step with neither (only `sample_every` or `save_lora_every` fell on it) showed
weights no file kept. Now each such sample round writes the EMA weights of its step as
samples/<name>-step-N.ema.safetensors + .json (training/adapters/export.save_ema_step_lora: the run's
layout, header, sidecar and loader check), and removes the previous pair of the run's: one pair
at most, so nothing grows with the run's length (a LoRA per round would: keep_loras counts the
raw snapshots). So the newest preview is always obtainable (lora/snapshots.ema_preview_loras:
listed, downloaded and generated with `{"name", "step", "weights": "ema"}` as a checkpoint's);
older previews of steps without a checkpoint say so in their note (sample_source.ema_gap_note).
A session removes at once only the pairs it wrote itself; an earlier session's pair goes when the
session ends well (`finish_preview_ema`, beside the snapshots' keep_loras), so a resumed session
stopped without save (discarded) leaves the pair it found (RELIABILITY 1743: it was gone, with the
weights of that preview).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lorastudio.folder_entries import entries
from lorastudio.training.adapters.export import save_ema_step_lora
from lorastudio.training.resume.folder_guard import check_folder
from lorastudio.training.resume.run_files import SAMPLES, ema_preview_step, ema_step_name

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.training.optimize import RunState
    from lorastudio.training.preflight import PreparedRun


def keeps_preview_ema(cfg: TrainConfig) -> bool:
    """Whether the run's previews render EMA weights (ema_decay with sample_with_ema)."""
    return cfg.ema_decay is not None and cfg.sample_with_ema


def keep_preview_ema(run: PreparedRun, state: RunState) -> Path | None:
    """On rank 0 of a run whose previews render EMA weights: write the EMA weights of the step
    just done (state.steps_run, whose sample round rendered them) into samples/, then remove
    every other such pair this session wrote there (an earlier session's: `finish_preview_ema`).
    The caller skips a step whose checkpoint keeps them. Returns the new .safetensors path (None:
    not such a run, or not rank 0). The new pair, where the folder had none of its name, is
    recorded as the session's (previews.created, as a sample PNG is), so a discarded session
    takes it with its samples. Raises what writing a LoRA raises (OSError, ConfigError)."""
    if not keeps_preview_ema(run.cfg) or state.ema is None or not state.ctx.is_main:
        return None
    folder = run.run_dir / SAMPLES
    stem = ema_step_name(str(run.cfg.output_name), state.steps_run)  # save_ema_step_lora's
    found = {p for p in (folder / f"{stem}.safetensors", folder / f"{stem}.json") if p.exists()}
    path = save_ema_step_lora(run, state, folder, kept_in=SAMPLES)  # staged, then renamed in
    created = state.previews.created if state.previews is not None else []
    for old in _pairs(run.run_dir, keep={path.name, path.with_suffix(".json").name}):
        if state.resume is None or old in created:  # a fresh run's folder holds its own only
            old.unlink(missing_ok=True)
    if state.previews is not None:
        state.previews.created += [
            p for p in (path, path.with_suffix(".json")) if p not in created and p not in found
        ]
    return path


def _pairs(run_dir: Path, keep: set[str]) -> list[Path]:
    """The run's EMA preview files in samples/ (regular files of its names), but those of `keep`."""
    folder = run_dir / SAMPLES
    check_folder(folder)  # another's folder at the run's path: nothing of it goes
    return [
        old
        for old in entries(folder)
        if old.name not in keep
        and ema_preview_step(run_dir.name, old.name) is not None
        and old.is_file()
        and not old.is_symlink()
    ]


def finish_preview_ema(run_dir: Path) -> None:
    """At a session's good end (its LoRA written, as keep_loras is applied): remove every EMA
    preview pair of the run's but the newest step's, an earlier session's too."""
    if not (run_dir / SAMPLES).is_dir():  # no previews (or none rendered yet)
        return
    pairs = _pairs(run_dir, keep=set())
    steps = [ema_preview_step(run_dir.name, p.name) or 0 for p in pairs]
    newest = max(steps, default=0)
    for old, step in zip(pairs, steps, strict=True):
        if step != newest:
            old.unlink(missing_ok=True)
