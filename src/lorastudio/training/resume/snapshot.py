"""What a checkpoint holds, and putting it back: the loop's complete state between two optimizer
steps, so a resumed run continues bitwise where the interrupted one stopped (on CPU).

state.pt = torch.save of {"step", "losses", "loss_record", "optimizer", "scheduler", "scaler", "sampler",
"meter", "guard", "rng", "ema", "cpu_threads", "device_name", "dtype_path"}; "losses" = the newest
losses, "loss_record" = where the run folder's losses.bin holds them all (training/resume/loss_record.py);
"ema" = the adapter EMA's shadow (None without one); "rng" = python `random`, numpy's global state, torch CPU, every CUDA
device, plus the run's own streams: the numpy Generator (crops, flips, caption dropout) and the
CPU torch.Generator (noise, timesteps, cached-variant choice); "cpu_threads" = torch's thread count of
a CPU run (None on an accelerator): a CPU run's sums round otherwise at another count, so a resume
at another one is said (a RunWarning: not bitwise the uninterrupted run, RELIABILITY 1791); "device_name"
and "dtype_path" = the device kind and numerics it ran (training/resume/machine_record.py): a resume under
others is said too (RELIABILITY 1873). lora.safetensors holds the LoRA
weights (peft naming); text_encoders.safetensors the text encoders' (SDXL train_text_encoder). Loading uses torch.load(weights_only=True).
"""

from __future__ import annotations

import datetime
import json
import pickle
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lorastudio import __version__
from lorastudio.data import BucketBatchSampler
from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.lora.files import follow_umask
from lorastudio.open_reason import library_open_reason
from lorastudio.training.adapters.lora import lora_state_dict
from lorastudio.training.ema import AdapterEma
from lorastudio.training.meter import DivergenceGuard, StepMeter
from lorastudio.training.resume.checkpoint import (
    INFO_FILE,
    LORA_FILE,
    PLAN_KEY,
    STATE_FILE,
    write_checkpoint_folder,
)
from lorastudio.training.resume.checkpoint_writes import save_tensors_file, save_torch_file
from lorastudio.training.resume.extend import EXTENSIONS_KEY
from lorastudio.training.resume.identity import IDENTITY_FORMAT
from lorastudio.training.resume.loss_record import RECORD_KEY, LossRecord
from lorastudio.training.resume.machine_record import machine_notes

TEXT_ENCODERS_FILE = "text_encoders.safetensors"  # the text encoders' LoRA (train_text_encoder)
_STATE_KEYS = ("step", "losses", "optimizer", "scheduler", "scaler", "sampler", "meter", "guard", "rng")


@dataclass
class LoopParts:
    """Everything of the optimization loop that a checkpoint saves and restores."""

    denoiser: Any  # with the LoRA adapter
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    sampler: BucketBatchSampler
    meter: StepMeter
    guard: DivergenceGuard
    rng: np.random.Generator  # the run's numpy stream (crops, flips, caption dropout)
    generator: torch.Generator  # the run's CPU torch stream (noise, timesteps, variants)
    ema: AdapterEma | None = None  # the EMA of the adapter weights (cfg.ema_decay), saved as "ema"
    text_encoders: Any = None  # SDXL train_text_encoder: TextEncoderLora, saved as TEXT_ENCODERS_FILE
    device_type: str = "cpu"  # the training device's type: a CPU run records its thread count
    device_name: str = "cpu"  # its kind (machine_record.device_name), recorded and compared on a resume
    dtype_path: str = ""  # its numerics (machine_record.dtype_path; "": unknown, not recorded)


def capture_rng(rng: np.random.Generator, generator: torch.Generator) -> dict[str, Any]:
    """Every random stream the run draws from (plain Python values and tensors only)."""
    numpy_global = np.random.get_state(legacy=False)
    numpy_global["state"]["key"] = torch.from_numpy(numpy_global["state"]["key"].astype(np.int64))
    return {
        "python": random.getstate(),
        "numpy": numpy_global,
        "torch_cpu": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "run_numpy": rng.bit_generator.state,
        "run_torch": generator.get_state(),
    }


def restore_rng(state: dict[str, Any], rng: np.random.Generator, generator: torch.Generator) -> None:
    """Put every stream of `capture_rng` back (the run's streams in place, in the same objects).
    CUDA states are restored when this host has the same number of devices."""
    random.setstate(_as_tuple(state["python"]))
    numpy_global = dict(state["numpy"])
    numpy_global["state"] = {
        **numpy_global["state"],
        "key": state["numpy"]["state"]["key"].numpy().astype(np.uint32),
    }
    np.random.set_state(numpy_global)
    torch.set_rng_state(state["torch_cpu"])
    cuda = state["cuda"]
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)
    rng.bit_generator.state = state["run_numpy"]
    generator.set_state(state["run_torch"])


def _as_tuple(value: Any) -> Any:
    """random.setstate needs tuples where a round trip may have produced lists."""
    if isinstance(value, list | tuple):
        return tuple(_as_tuple(v) for v in value)
    return value


def save_checkpoint(
    run_dir: Path,
    parts: LoopParts,
    *,
    step: int,
    total_steps: int,
    losses: LossRecord,
    identity: dict[str, Any],
    config: dict[str, Any],
    plan: dict[str, Any] | None = None,
    extensions: list[dict[str, Any]] | None = None,
    validation: list[dict[str, Any]] | None = None,
    beside: Callable[[Path], Any] | None = None,
) -> Path:
    """Write checkpoint `step` of the run (atomically; see training/resume/checkpoint.py). Returns its
    folder. `identity` is the run's identity, `config` its resolved config (JSON dict), `plan`
    the plan it runs (training/planning/plan.py Plan.as_dict; a resume reuses it), `extensions` the
    record of the times the run was trained longer (training/resume/extend.py), `validation` the
    validation rounds so far ({step, loss} each, training/validate.py; a resume continues them),
    `beside` a writer of more files into the checkpoint's staging folder (an EMA run's LoRA of the
    step's EMA weights: training/adapters/export.save_ema_step_lora), part of the checkpoint's one write.
    `losses` (steps 1..step) go to the run folder's losses.bin first (its new ones appended), the
    checkpoint naming them there and keeping the newest itself."""
    state = {
        "step": step,
        "losses": losses.window(),
        "optimizer": parts.optimizer.state_dict(),
        "scheduler": parts.scheduler.state_dict(),
        "scaler": parts.scaler.state_dict(),
        "sampler": parts.sampler.state_dict(),
        "meter": parts.meter.state_dict(),
        "guard": parts.guard.state_dict(),
        "rng": capture_rng(parts.rng, parts.generator),
        "ema": parts.ema.state_dict() if parts.ema is not None else None,
        "cpu_threads": torch.get_num_threads() if parts.device_type == "cpu" else None,
        "device_name": parts.device_name,  # a resume elsewhere is said (RELIABILITY 1873)
        "dtype_path": parts.dtype_path or None,
    }
    info = {
        "format": IDENTITY_FORMAT,
        "step": step,
        "total_steps": total_steps,
        "identity": identity,
        "config": config,
        **({PLAN_KEY: plan} if plan is not None else {}),
        **({EXTENSIONS_KEY: extensions} if extensions else {}),
        **({"validation": validation} if validation is not None else {}),
        "created_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "lorastudio_version": __version__,
    }

    def write(folder: Path) -> None:
        state[RECORD_KEY] = losses.flush(run_dir)  # before the checkpoint is renamed into place
        save_tensors_file(lora_state_dict(parts.denoiser), folder / LORA_FILE)
        follow_umask(folder / LORA_FILE)  # safetensors writes 0600
        if parts.text_encoders is not None:
            save_tensors_file(parts.text_encoders.state_dict(), folder / TEXT_ENCODERS_FILE)
            follow_umask(folder / TEXT_ENCODERS_FILE)
        save_torch_file(state, folder / STATE_FILE)  # a full disk's OSError, not torch's RuntimeError
        (folder / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        if beside is not None:
            beside(folder)

    return write_checkpoint_folder(run_dir, step, write)


def _group_sizes(optimizer_state: Any) -> list[int] | None:
    """The number of parameters of each param group of an optimizer's state_dict (None: no
    readable groups)."""
    groups = optimizer_state.get("param_groups") if isinstance(optimizer_state, dict) else None
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        return None
    return [len(g.get("params", ())) for g in groups]


def thread_note(checkpoint: Path, recorded: Any, device_type: str) -> str | None:
    """What a CPU resume at another torch thread count than `recorded` (state.pt's "cpu_threads";
    None, or absent in an older checkpoint: unknown, nothing said) means for exactness, or None."""
    now = torch.get_num_threads()
    if device_type != "cpu" or type(recorded) is not int or recorded == now:
        return None
    return (
        f"this resume runs at {now} CPU thread(s), {checkpoint.name} was written at {recorded}: a CPU run's "
        "sums round otherwise at another thread count, so the steps from here are close to the uninterrupted "
        f"run's, not bitwise; to continue exactly resume with OMP_NUM_THREADS={recorded}"
    )


def load_checkpoint(checkpoint: Path, parts: LoopParts, losses: LossRecord) -> tuple[int, list[str]]:
    """Restore the loop's state from `checkpoint` into `parts` (LoRA weights copied into the
    existing parameters, so the optimizer keeps referring to them) and the losses of steps
    1..step into `losses` (from the run folder's losses.bin; an older version's checkpoint holds
    them itself). Returns (step, notes for RunWarnings: the losses the file did not hold, NaN;
    another CPU thread count than the checkpoint's, thread_note; another device kind or dtype
    path, machine_record.machine_notes). Raises ConfigError (field "resume") when the checkpoint does not fit the
    model or cannot be read."""
    from peft.utils import set_peft_model_state_dict
    from safetensors.torch import load_file

    try:
        weights = load_file(str(checkpoint / LORA_FILE))
        state = torch.load(checkpoint / STATE_FILE, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError) as err:
        reason = library_open_reason(err).splitlines()[0]  # safetensors says ENOENT for EACCES
        raise ConfigError(
            [FieldProblem("resume", f"cannot read checkpoint {checkpoint}: {reason}")]
        ) from None
    if not isinstance(state, dict) or any(key not in state for key in _STATE_KEYS):
        raise ConfigError(
            [FieldProblem("resume", f"cannot read checkpoint {checkpoint}: incomplete state.pt")]
        )
    expected = lora_state_dict(parts.denoiser)
    if set(weights) != set(expected) or any(weights[k].shape != expected[k].shape for k in expected):
        raise ConfigError(
            [FieldProblem("resume", f"the LoRA weights of {checkpoint} do not fit this run's adapter")]
        )
    bad = next(
        (k for k, v in weights.items() if not v.is_floating_point() or not bool(torch.isfinite(v).all())),
        None,
    )
    if bad is not None:  # copied in, a NaN would train on as NaN and an integer tensor be cast silently
        raise ConfigError(
            [FieldProblem("resume", f"the LoRA weights of {checkpoint}: {bad} is not a finite float tensor")]
        )
    result = set_peft_model_state_dict(parts.denoiser, weights)
    if getattr(result, "unexpected_keys", None):
        raise ConfigError([FieldProblem("resume", f"unexpected LoRA keys in {checkpoint}")])
    if parts.text_encoders is not None:
        _load_text_encoders(checkpoint, parts.text_encoders)
    if _group_sizes(state["optimizer"]) != _group_sizes(parts.optimizer.state_dict()):
        raise ConfigError(  # torch's own load raised a bare ValueError
            [
                FieldProblem(
                    "resume",
                    f"the optimizer state of {checkpoint} has param groups of {_group_sizes(state['optimizer'])} "
                    f"parameters, this run's optimizer {_group_sizes(parts.optimizer.state_dict())}: it does not "
                    "fit this run's adapter",
                )
            ]
        )
    parts.optimizer.load_state_dict(state["optimizer"])
    parts.scheduler.load_state_dict(state["scheduler"])
    parts.scaler.load_state_dict(state["scaler"])
    parts.sampler.load_state_dict(state["sampler"])
    parts.meter.load_state_dict(state["meter"])
    parts.guard.load_state_dict(state["guard"])
    restore_rng(state["rng"], parts.rng, parts.generator)
    if parts.ema is not None:
        if state.get("ema") is None:
            raise ConfigError([FieldProblem("resume", f"{checkpoint} holds no EMA state for ema_decay")])
        try:
            parts.ema.load_state_dict(state["ema"])
        except ValueError as err:
            raise ConfigError([FieldProblem("resume", f"{checkpoint}: {err}")]) from None
    step = int(state["step"])
    lost = losses.restore(checkpoint.parent.parent, step, state)
    notes = [lost] if lost is not None else []
    threads = thread_note(checkpoint, state.get("cpu_threads"), parts.device_type)
    notes += [threads] if threads is not None else []
    return step, notes + machine_notes(checkpoint, state, parts.device_name, parts.dtype_path)


def _load_text_encoders(checkpoint: Path, text_encoders: Any) -> None:
    """Restore the text encoders' LoRA of a train_text_encoder run from `checkpoint`. Raises
    ConfigError (field "resume") when the file is missing or does not fit."""
    from safetensors.torch import load_file

    path = checkpoint / TEXT_ENCODERS_FILE
    if not path.is_file():
        raise ConfigError(
            [FieldProblem("resume", f"{checkpoint} holds no text-encoder LoRA for train_text_encoder")]
        )
    try:
        text_encoders.load_state_dict(load_file(str(path)))
    except (OSError, ValueError, RuntimeError) as err:
        raise ConfigError([FieldProblem("resume", f"{path}: {library_open_reason(err)}")]) from None
