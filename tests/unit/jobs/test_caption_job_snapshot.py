"""A caption job's snapshot: how long it has left (RELIABILITY 1942: eta_s for the API and the
web, the CLI's lines, none once it has ended or was interrupted; a fake clock, nothing timed) and
the prompt and max tokens that made its captions (RELIABILITY 1943), kept in its record."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorastudio.captioning.options import CaptionOptions
from lorastudio.cli.caption_cmd import _print_event
from lorastudio.jobs.caption_job import CaptionJob
from lorastudio.jobs.caption_records import list_records, owner, write_record


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _job(clock: _Clock) -> CaptionJob:
    options = CaptionOptions(model="m", device="cpu")
    return CaptionJob(
        id="ab12", dataset="ds", folder=Path("/nonexistent"), options=options, device="cpu", clock=clock
    )


def _image(job: CaptionJob, index: int, kind: str = "caption_progress") -> None:
    event = {"type": kind, "index": index, "total": 5, "file": f"{index}.png"}
    job.apply({**event, "caption": "x"} if kind == "caption_progress" else {**event, "reason": "r"})


def test_eta_from_the_images_done_since_the_model_loaded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = _Clock()
    job = _job(clock)
    assert job.snapshot()["eta_s"] is None  # loading
    clock.now = 160.0  # a minute of model load: not an image's time
    job.apply({"type": "caption_started", "total": 5, "skipped": 0})
    assert job.snapshot()["eta_s"] is None  # no image done yet
    clock.now = 170.0
    _image(job, 1)
    clock.now = 180.0
    _image(job, 2, "caption_failed")
    clock.now = 500.0  # polled later: the estimate is of the last image's time, not the poll's
    assert job.snapshot()["eta_s"] == 30.0  # 20 s for 2 images, 3 left
    _print_event({"type": "caption_progress", "index": 2, "total": 5, "file": "2.png", "caption": "x"}, 30.0)
    _print_event(
        {"type": "caption_progress", "index": 3, "total": 5, "file": "3.png", "caption": "x"}, 7300.0
    )
    assert capsys.readouterr().out.splitlines() == [
        "[2/5] 2.png: x  (~30 s left)",
        "[3/5] 3.png: x  (~2 h 02 min left)",
    ]
    write_record(tmp_path, job.snapshot(), {"pid": 2**22 + 12345, "start": "gone", "source": "cli"})
    (interrupted,) = list_records(tmp_path)  # its process is gone: no time left to say
    assert interrupted["status"] == "interrupted" and interrupted["eta_s"] is None
    for index in (3, 4, 5):
        _image(job, index)
    job.status = "completed"
    assert job.snapshot()["eta_s"] is None
    write_record(tmp_path, job.snapshot(), owner("cli"))
    assert list_records(tmp_path)[0]["status"] == "completed"


def test_the_prompt_and_max_tokens_are_in_the_snapshot_and_its_record(tmp_path: Path) -> None:
    asked = CaptionOptions(model="m", device="cpu", prompt="List the objects", max_tokens=120)
    job = CaptionJob(id="cd34", dataset="ds", folder=Path("/nonexistent"), options=asked, device="cpu")
    assert (job.snapshot()["prompt"], job.snapshot()["max_tokens"]) == ("List the objects", 120)
    job.status = "completed"
    write_record(tmp_path, job.snapshot(), owner("cli"))
    (read,) = list_records(tmp_path)
    assert (read["prompt"], read["max_tokens"]) == ("List the objects", 120)
    default = CaptionJob(
        id="ef56", dataset="ds", folder=Path("/x"), options=CaptionOptions(model="m"), device="cpu"
    )
    assert (default.snapshot()["prompt"], default.snapshot()["max_tokens"]) == (None, 60)  # the model's own
