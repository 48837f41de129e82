"""A caption given by hand while a caption job runs (no overwrite) is kept, not replaced by the
model's (RELIABILITY 1940): the .txt store (its .txt files and, RELIABILITY 2051, its
metadata.jsonl rows), the metadata.jsonl store, the run's events and counts, the job's snapshot
and the CLI's line."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lorastudio.captioning.options import CaptionOptions
from lorastudio.captioning.plan import plan_captions
from lorastudio.captioning.run import caption_dataset
from lorastudio.captioning.source import resolve_captioner
from lorastudio.captioning.targets import KEPT_REASON, CaptionWriter
from lorastudio.data import decoded
from lorastudio.jobs.caption_job import CaptionJob
from lorastudio.settings import get_settings


def _rows(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "metadata.jsonl").read_text(encoding="utf-8").splitlines()]


def test_txt_written_by_hand_after_the_plan_is_kept(make_dataset: Callable[..., Path]) -> None:
    folder = make_dataset()
    plan = plan_captions(folder, overwrite=False)
    writer = CaptionWriter(folder, plan.store, keep_new=True)
    assert writer.write(folder / "blue.png", "model blue")
    (folder / "green.txt").write_text("my own green\n", encoding="utf-8")  # the user, mid-run
    assert not writer.write(folder / "green.png", "model green")
    assert (folder / "green.txt").read_text(encoding="utf-8") == "my own green\n"
    (folder / "red.txt").write_text("  \n", encoding="utf-8")  # a blank .txt is no caption: written
    assert writer.write(folder / "red.png", "model red")
    assert (folder / "red.txt").read_text(encoding="utf-8") == "model red\n"
    overwriting = CaptionWriter(folder, plan.store)  # overwrite asked: replaced, as before
    assert overwriting.write(folder / "green.png", "model green")
    assert (folder / "green.txt").read_text(encoding="utf-8") == "model green\n"


def test_metadata_row_or_txt_written_by_hand_after_the_plan_is_kept(
    make_dataset: Callable[..., Path],
) -> None:
    folder = make_dataset()
    (folder / "metadata.jsonl").write_text(
        json.dumps({"file_name": "red.png", "text": "", "repeats": 2}) + "\n", encoding="utf-8"
    )
    plan = plan_captions(folder, overwrite=False)
    assert plan.store == "metadata" and len(plan.todo) == 4
    writer = CaptionWriter(folder, plan.store, keep_new=True)
    for image in plan.todo:
        assert writer.write(image, f"model {image.stem}")  # queued
    hand = {"file_name": "red.png", "text": "my own red", "repeats": 2}
    (folder / "metadata.jsonl").write_text(json.dumps(hand) + "\n", encoding="utf-8")  # the user, mid-run
    (folder / "white.txt").write_text("my own white\n", encoding="utf-8")  # a .txt wins over a row
    assert writer.flush() == ["red.png", "white.png"]
    assert _rows(folder) == [
        hand,
        {"file_name": "blue.png", "text": "model blue"},
        {"file_name": "green.png", "text": "model green"},
    ]
    assert (folder / "white.txt").read_text(encoding="utf-8") == "my own white\n"


def test_run_keeps_a_caption_written_by_hand_and_counts_it_skipped(
    tiny_vlm: Path, make_dataset: Callable[..., Path]
) -> None:
    folder = make_dataset()
    events: list[dict[str, Any]] = []

    def cancelled() -> bool:  # after the first caption, the user writes white.txt by hand
        if any(e["type"] == "caption_progress" for e in events) and not (folder / "white.txt").exists():
            (folder / "white.txt").write_text("my own white\n", encoding="utf-8")
        return False

    options = CaptionOptions(model=str(tiny_vlm), max_tokens=4, device="cpu")
    source = resolve_captioner(get_settings(), options.model)
    summary = caption_dataset(folder, source, options, events.append, cancelled)
    assert (folder / "white.txt").read_text(encoding="utf-8") == "my own white\n"
    assert [f for f, _ in summary.captioned] == ["blue.png", "green.png", "red.png"]
    assert summary.skipped == ["white.png"]
    kept = [e for e in events if e["type"] == "caption_kept"]
    assert kept == [
        {
            "type": "caption_kept",
            "index": 4,
            "total": 4,
            "file": "white.png",
            "reason": KEPT_REASON,
            "counted": False,
            "model": False,  # found before the model was asked (RELIABILITY 2052)
        }
    ]
    assert events[-1]["captioned"] == 3 and events[-1]["skipped"] == 1
    job = CaptionJob(id="a1", dataset="ds", folder=folder, options=options, device="cpu")
    for event in events:
        job.apply(event)
    snap = job.snapshot()
    assert (snap["total"], snap["done"], snap["captioned"], snap["skipped"]) == (4, 4, 3, 1)


def test_job_undoes_a_counted_caption_whose_row_was_kept() -> None:
    options = CaptionOptions(model="m", device="cpu")
    job = CaptionJob(id="a1", dataset="ds", folder=Path("/nonexistent"), options=options, device="cpu")
    job.apply({"type": "caption_started", "total": 2, "skipped": 0})
    job.apply({"type": "caption_progress", "index": 1, "total": 2, "file": "a.png", "caption": "x"})
    job.apply({"type": "caption_progress", "index": 2, "total": 2, "file": "b.png", "caption": "y"})
    job.apply({"type": "caption_kept", "file": "a.png", "reason": KEPT_REASON, "counted": True})
    snap = job.snapshot()
    assert (snap["done"], snap["captioned"], snap["skipped"]) == (2, 1, 1)
    assert snap["preview"] == [{"file": "b.png", "caption": "y"}]


def test_a_kohya_caption_file_is_kept_and_said(
    make_dataset: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """RELIABILITY 1944: an image captioned only by kohya's `<stem>.caption` (kohya's default
    extension, which a plain dataset's run does not read) kept it, and the job says so."""
    from lorastudio.cli.caption_cmd import _print_event

    folder = make_dataset()
    (folder / "red.CAPTION").write_text("my kohya red\n", encoding="utf-8")
    (folder / "blue.caption").write_text(" \n", encoding="utf-8")  # blank: no caption
    plan = plan_captions(folder, overwrite=False)
    assert [p.name for p in plan.todo] == ["blue.png", "green.png", "white.png"]
    assert (plan.skipped, plan.kohya_kept) == (["red.png"], ["red.png"])
    assert [p.name for p in plan_captions(folder, overwrite=True).todo] == [
        "blue.png", "green.png", "red.png", "white.png"
    ]  # fmt: skip
    event = {"type": "caption_started", "total": 3, "skipped": 1, "kohya_kept": ["red.png"], "kohya_count": 1}
    _print_event(event)
    job = CaptionJob(id="a2", dataset="ds", folder=folder, options=CaptionOptions(model="m"), device="cpu")
    job.apply(event)
    assert (job.snapshot()["skipped"], job.snapshot()["kohya_kept"]) == (1, 1)  # the web panel says it
    assert "1 of them are captioned only by a kohya .caption file (red.png)" in capsys.readouterr().out


def test_a_dataset_without_top_level_images_is_refused_naming_its_kohya_folders(tmp_path: Path) -> None:
    """RELIABILITY 1944: a kohya layout (datasets/k/10_sks/*.png) was "captioned": 0 images, no word.
    Since 2053 one of kohya folders only is captioned in place (test_caption_kohya_in_place.py);
    one with another sub-folder beside them, which a run refuses to read in place too, is refused."""
    from PIL import Image

    from lorastudio.errors import DatasetError

    kohya = tmp_path / "k" / "10_sks"
    kohya.mkdir(parents=True)
    (tmp_path / "k" / "misc").mkdir()
    Image.new("RGB", (16, 16)).save(kohya / "a.png")
    with pytest.raises(DatasetError) as err:
        plan_captions(tmp_path / "k", overwrite=False)
    assert "has no images to caption" in str(err.value)
    problem = err.value.problems[0]
    assert (
        problem.startswith("k/10_sks: a kohya folder beside other sub-folders (misc)")
        and "--kohya" in problem
    )
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="has no images to caption"):
        plan_captions(tmp_path / "empty", overwrite=False)


def test_a_row_typed_by_hand_while_a_txt_store_job_runs_is_kept(
    make_dataset: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELIABILITY 2051: in a dataset whose captions go to .txt files but which also has a
    metadata.jsonl, a caption typed into an image's row while the job ran was not seen: the job
    wrote the image's .txt, which won, and the hand text became a second caption the scan names as
    not used. Now the row is read (again only when metadata.jsonl changed) before each write."""
    folder = make_dataset(captions={"blue": "blue by hand"})  # a .txt sidecar: the .txt store
    table = folder / "metadata.jsonl"
    table.write_text(json.dumps({"file_name": "red.png", "text": "", "repeats": 2}) + "\n", encoding="utf-8")
    # a file changed within the file clock's tick is read again at each check: the test's own
    # writes would be (no wall-clock wait here: the file clock 10 s on), a file stamped ahead too
    later = time.time_ns() + 10 * 10**9
    monkeypatch.setattr(decoded, "file_clock_ns", lambda: later)
    past = time.time_ns() - 3600 * 10**9  # settled an hour ago: not read again while unchanged
    os.utime(table, ns=(past, past))
    plan = plan_captions(folder, overwrite=False)
    assert plan.store == "txt" and [p.name for p in plan.todo] == ["green.png", "red.png", "white.png"]
    writer = CaptionWriter(folder, plan.store, keep_new=True)
    assert writer.write(folder / "green.png", "model green")
    hand = {"file_name": "red.png", "text": "my own red", "repeats": 2}
    table.write_text(json.dumps(hand) + "\n", encoding="utf-8")  # the user, mid-run
    os.utime(table, ns=(past + 10**9, past + 10**9))
    assert not writer.write(folder / "red.png", "model red")
    assert not (folder / "red.txt").exists() and _rows(folder) == [hand]
    assert writer.write(folder / "white.png", "model white")
    assert writer._rows.reads == 2  # the row read at the first write and after the edit only
    # an edit of the same size and stamp: a file stamped ahead of the file clock (a clock ahead)
    # is read again at each check, never taken as unchanged
    soon = time.time_ns() + 3600 * 10**9
    (folder / "green.txt").unlink()
    for name, seen in (("gre3n.png", False), ("green.png", True)):  # one size, one stamp
        table.write_text(json.dumps({"file_name": name, "text": "my"}) + "\n", encoding="utf-8")
        os.utime(table, ns=(soon, soon))
        assert writer.captioned_now(folder / "green.png") is seen
