"""GET /api/train/status's `event_seq` is the id of the last event its job snapshot reflects:
no event after it is folded in, none up to it is missing (RELIABILITY 195). The web UI folds the
events after a snapshot's event_seq onto it again (web/src/lib/eventOrder.ts): a snapshot that
reflected an event newer than its event_seq, or missed one older, would show a step the screen
never saw, or bring an older one back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jobs_fake_workers as fakes
from tests.polling import until

from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.jobs.service import JobService
from lorastudio.jobs.store import RunStore
from lorastudio.settings import Settings


def _expected(events: list[tuple[int, dict[str, Any]]], seq: int, kind: str) -> dict[str, Any] | None:
    """The last event of `kind` with id <= seq (None: none)."""
    hits = [e for i, e in events if i <= seq and e["type"] == kind]
    return hits[-1] if hits else None


def test_a_status_snapshot_reflects_exactly_the_events_up_to_its_event_seq(
    settings: Settings, tiny_model: Callable[[str], Path], shapes: Path
) -> None:
    model = tiny_model("flux")
    service = JobService(
        settings, RunStore.open(settings.db_path), GpuArbiter(), worker_target=fakes.burst_of_steps
    ).start()
    try:
        cfg = {"family": "flux", "base_model": str(model), "data_dir": "shapes", "resolution": 32}
        job = service.submit({**cfg, "steps": fakes.BURST_STEPS, "output_name": "burst"})
        answers: list[dict[str, Any]] = []

        def read() -> bool:  # snapshots read while the steps pour in, until 5 steps were seen
            answer = service.status(since=0)
            if answer["job"] is not None:  # None while the job waits in the queue for the dispatcher
                answers.append(answer)
            return len({a["job"]["progress"]["step"] for a in answers if a["job"]["progress"]}) >= 5

        until(read, timeout=120.0, what="snapshots at 5 different steps")
        service.stop(True, job_id=job["id"])
        events = service.events_after(0)
        assert events and events[0][0] == 1  # the log still holds every event of this life
        for answer in answers:
            snap, seq = answer["job"], answer["event_seq"]
            assert snap["id"] == job["id"]
            progress = _expected(events, seq, "progress")
            assert snap["progress"] == (
                None if progress is None else {k: v for k, v in progress.items() if k != "job_id"}
            )
            sample = _expected(events, seq, "sample_ready")
            assert snap["samples"] == (
                None if sample is None else {"step": sample["step"], "images": sample["images"]}
            )
            assert snap["steps_run"] == (0 if progress is None else progress["step"])
    finally:
        service.shutdown()
