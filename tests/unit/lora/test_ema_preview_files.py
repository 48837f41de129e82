"""The EMA preview file (training/ema_preview.py, RELIABILITY 1492) is one of the run's files: it is
listed as its step's EMA weights (lora/snapshots.run_loras: downloaded and generated as a
checkpoint's), recognised as the run's own (run_files.owned: a fresh run's clean-up takes it),
and only under its run's name (another run's name, a link or a file of another shape stays)."""

from __future__ import annotations

import json
from pathlib import Path

from lorastudio.lora.snapshots import ema_lora_at, run_loras
from lorastudio.training.resume.run_files import owned, remove_session_files


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


def test_a_resumed_session_removes_only_its_own_pairs_until_it_ends_well(tmp_path: Path, monkeypatch) -> None:
    """RELIABILITY 1743: a resumed session's preview round removed the pair an earlier session
    kept, so a stop without save (which removes the session's own) left the folder without the
    weights of that earlier preview. Now a round removes this session's pairs only; at the
    session's good end `finish_preview_ema` keeps the newest step's pair alone."""
    from types import SimpleNamespace

    from lorastudio.training import ema_preview

    run_dir = tmp_path / "x"
    samples = run_dir / "samples"
    samples.mkdir(parents=True)
    earlier = _pair(samples, "x-step-000004.ema")  # an earlier session's

    def save(run, state, folder, kept_in=None):  # export.save_ema_step_lora's files, no model
        return _pair(folder, f"x-step-{state.steps_run:06d}.ema")

    monkeypatch.setattr(ema_preview, "save_ema_step_lora", save)
    previews = SimpleNamespace(created=[])
    run = SimpleNamespace(
        cfg=SimpleNamespace(ema_decay=0.5, sample_with_ema=True, output_name="x"), run_dir=run_dir
    )
    state = SimpleNamespace(
        ema=object(), ctx=SimpleNamespace(is_main=True), previews=previews, resume=run_dir
    )
    for step in (6, 8):
        state.steps_run = step
        ema_preview.keep_preview_ema(run, state)
    names = sorted(p.name for p in samples.iterdir())
    assert names == [f"x-step-00000{s}.ema.{e}" for s in (4, 8) for e in ("json", "safetensors")]
    assert [p for p in previews.created if p.exists()] == [samples / n for n in reversed(names[2:])]
    assert earlier not in previews.created  # a discard takes this session's only
    assert earlier.is_file()  # was: removed by the step-6 round
    ema_preview.finish_preview_ema(run_dir)  # the session ended well
    assert sorted(p.name for p in samples.iterdir()) == names[2:]
