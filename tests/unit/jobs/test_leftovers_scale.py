"""A server's start in a long-used home (session 34 home at scale audit, RELIABILITY 1223): the
crash-leftover scan (jobs/leftovers.find_leftovers, run before the server answers) walked every
entry of every run folder (checkpoints, samples, snapshots: `survey`) and stat'ed every gallery
image: 2.7 s of a 12.6 s start in a home of 2,000 runs and 20,000 images (bench/home_scale.py).
A folder that keeps its LoRA is no longer walked, a gallery image no longer stat'ed; what the
scan finds is the same. Counted in calls, never timed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from bench.home_build import Scale, build_home, output_name

from lorastudio.jobs import leftovers
from lorastudio.jobs.leftovers import find_leftovers
from lorastudio.settings import Settings

SCALE = Scale(runs=12, heavy_every=4, checkpoints=3, samples=8, gallery=300, datasets=0, metrics=1)


def test_the_start_scan_walks_no_kept_run_folder_and_stats_no_gallery_image(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_home(settings.home, SCALE)
    staged = settings.outputs_dir / output_name(4) / "samples" / ".staging-0a1b"  # a killed sample write
    staged.write_bytes(b"x")
    sidecar_tmp = settings.home / "gallery" / f".000007_x.json.{'0' * 32}.tmp"  # a killed sidecar write
    sidecar_tmp.write_bytes(b"x")
    killed = settings.outputs_dir / "killed-early" / "samples"  # a run killed before it wrote a file
    killed.mkdir(parents=True)

    walked: Counter[str] = Counter()
    real_survey = leftovers.survey

    def survey(run: Path) -> tuple[list[Path], list[Path]]:
        walked[run.name] += 1
        return real_survey(run)

    stat_calls: Counter[str] = Counter()
    real_is_file = Path.is_file

    def is_file(path: Path) -> bool:
        if path.parent.name == "gallery":
            stat_calls[path.suffix] += 1
        return real_is_file(path)

    monkeypatch.setattr(leftovers, "survey", survey)
    monkeypatch.setattr(Path, "is_file", is_file)
    found = find_leftovers(settings)
    assert found == sorted([staged, sidecar_tmp, settings.outputs_dir / "killed-early"])
    assert walked == Counter({"killed-early": 1}), walked  # every kept run: its LoRA says so
    assert stat_calls.get(".png", 0) == 0 and stat_calls.get(".json", 0) == 0, stat_calls
