"""Session 36 resume audit (slow): combinations a user picks, stopped with save at step k and
resumed, against the same run uninterrupted (tiny models, CPU): several datasets with repeats and a
regularisation entry, a validation split, EMA, accumulation, LoRA dropout, warmup and cosine, LoRA
snapshots, with each adapter and with Prodigy; SDXL with its text encoders, EMA and accumulation.
Compared: every progress event's step, epoch, loss, avg_loss, lr, grad_norm and skipped steps,
every validation round, and every file of the run folder outside checkpoints/ (LoRA tensors and
metadata but the dates, sample PNG bytes; the stop's own snapshot aside). The default suite keeps
each piece alone (test_resume, test_resume_audit, test_datasets_mix, test_regularisation,
test_validation_loss, test_ema, test_adapters, test_optimizers, test_text_encoder_lora); this
file runs them together (~20 s a case)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from lorastudio.settings import get_settings
from lorastudio.training.loop import train
from stop_at import stop_at

pytestmark = pytest.mark.slow

PROGRESS = ("step", "total_steps", "epoch", "loss", "avg_loss", "lr", "grad_norm", "skipped_steps")
DATED = {"modelspec.date", "lorastudio.created_at"}  # when the file was written


def _files(run_dir: Path) -> dict[str, Path]:
    """The run's files outside checkpoints/, by path with the run's name replaced."""
    return {
        str(p.relative_to(run_dir)).replace(run_dir.name, "RUN"): p
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.relative_to(run_dir).parts[0] != "checkpoints"
    }


def _metadata(path: Path, name: str) -> dict[str, str]:
    with safe_open(str(path), "pt") as f:
        found = f.metadata() or {}
    return {k: v.replace(name, "RUN") for k, v in found.items() if k not in DATED}


def _assert_same_folder(full: Path, part: Path, stopped_at: int) -> None:
    one, two = _files(full), _files(part)
    stop_snapshot = {f"loras/RUN-step-{stopped_at:06d}.{ext}" for ext in ("json", "safetensors")}
    assert set(two) - set(one) <= stop_snapshot and set(one) <= set(two), (sorted(one), sorted(two))
    for key, path in one.items():
        other = two[key]
        if key.endswith(".safetensors"):
            a, b = load_file(str(path)), load_file(str(other))
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), key
            assert _metadata(path, full.name) == _metadata(other, part.name), key
        elif key.endswith(".png"):
            assert path.read_bytes() == other.read_bytes(), key


def _resume_equals_full(make_config, family: str, stop: int, **over: object) -> None:
    whole: list = []
    train(make_config(family, output_name="full", **over), whole.append, device="cpu")
    events, check = stop_at(stop)
    assert train(make_config(family, output_name="part", **over), events.append, check, device="cpu").stopped
    run_dir = get_settings().outputs_dir / "part"
    train(make_config(family, output_name="part", **over), events.append, device="cpu", resume=run_dir)

    def progress(seen: list) -> list[tuple]:
        return [tuple(getattr(e, k) for k in PROGRESS) for e in seen if e.type == "progress"]

    def rounds(seen: list) -> list[dict]:
        return [e.model_dump() for e in seen if e.type == "validation"]

    assert progress(events) == progress(whole) and len(progress(whole)) == over["steps"]
    assert rounds(events) == rounds(whole)
    _assert_same_folder(get_settings().outputs_dir / "full", run_dir, stop)


@pytest.fixture
def mix(small_dataset: Path, tmp_path: Path) -> list[dict]:
    """small_dataset as two subject entries with repeats and a regularisation entry."""
    folders = [tmp_path / n for n in ("a", "b", "reg")]
    for folder in folders:
        folder.mkdir()
    for image, index in zip(sorted(small_dataset.glob("*.png")), [0, 0, 1, 2], strict=True):
        to = folders[index]
        shutil.copy(image, to / image.name)
        shutil.copy(image.with_suffix(".txt"), to / f"{image.stem}.txt")
    return [
        {"path": str(folders[0]), "repeats": 2},
        {"path": str(folders[1]), "repeats": 3},
        {"path": str(folders[2]), "regularisation": True},
    ]


EVERYTHING = {
    "steps": 6,
    "batch_size": 1,
    "grad_accum": 2,
    "ema_decay": 0.8,
    "validation_split": 0.25,
    "validate_every": 2,
    "caption_dropout": 0.3,
    "random_flip": True,
    "save_every": 2,
    "save_lora_every": 2,
    "lr_scheduler": "cosine",
    "lr_warmup_steps": 2,
    "prior_loss_weight": 0.5,
    "trigger_word": "sks",
}


@pytest.mark.parametrize(
    "optimizer", [{}, {"optimizer": "prodigy", "learning_rate": 1.0}], ids=["adamw", "prodigy"]
)
@pytest.mark.parametrize("adapter", ["lora", "loha", "lokr", "dora"])
def test_datasets_validation_ema_and_accumulation_resume_bitwise(make_config, mix, adapter, optimizer):
    dropout = 0.0 if adapter in ("loha", "lokr") else 0.1  # peft's LyCORIS layers take none
    _resume_equals_full(
        make_config, "flux", 3, data_dir=None, datasets=mix, adapter=adapter, lora_dropout=dropout,
        **EVERYTHING, **optimizer,
    )  # fmt: skip


def test_sdxl_text_encoders_with_ema_and_accumulation_resume_bitwise(make_config):
    _resume_equals_full(
        make_config, "sdxl", 3, steps=5, train_text_encoder=True, ema_decay=0.7, grad_accum=2,
        batch_size=1, caption_dropout=0.3, save_every=1, lora_dropout=0.1, lr_scheduler="cosine",
    )  # fmt: skip
