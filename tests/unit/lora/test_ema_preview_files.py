"""The EMA preview file (training/ema_preview.py, RELIABILITY 1492) is one of the run's files: it is
listed as its step's EMA weights (lora/snapshots.run_loras: downloaded and generated as a
checkpoint's), recognised as the run's own (run_files.owned: a fresh run's clean-up takes it),
and only under its run's name (another run's name, a link or a file of another shape stays)."""

from __future__ import annotations

import json
from pathlib import Path

from lorastudio.lora.snapshots import ema_lora_at, run_loras
from lorastudio.training.run_files import owned, remove_session_files


def _pair(folder: Path, stem: str, weights: str = "ema") -> Path:
    (folder / f"{stem}.json").write_text(json.dumps({"steps": 3, "ema": {"weights": weights}}))
    path = folder / f"{stem}.safetensors"
    path.write_bytes(b"x")
    return path


def test_the_kept_preview_ema_file_is_listed_and_owned_by_its_run_only(tmp_path: Path) -> None:
    run_dir = tmp_path / "x"
    samples = run_dir / "samples"
    samples.mkdir(parents=True)
    kept = _pair(samples, "x-step-000003.ema")
    other = _pair(samples, "y-step-000004.ema")  # another run's name
    (samples / "x-step-000005.ema.safetensors").symlink_to(kept)  # a link: never the run's
    assert [(r["step"], r["weights"], r["final"]) for r in run_loras(run_dir)] == [(3, "ema", False)]
    assert ema_lora_at(run_dir, 3) == kept
    assert owned(run_dir, kept) and owned(run_dir, kept.with_suffix(".json"))
    assert not owned(run_dir, other) and not owned(run_dir, samples / "x-step-000005.ema.safetensors")
    assert remove_session_files(run_dir) == [
        "samples/x-step-000005.ema.safetensors",
        "samples/y-step-000004.ema.json",
        "samples/y-step-000004.ema.safetensors",
    ]
    assert not kept.exists() and other.exists()
