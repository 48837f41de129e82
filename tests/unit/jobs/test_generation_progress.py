"""The server's side of the generation worker's progress (RELIABILITY 1050): GenerationProcess.call
tells each ("step", done, of) the worker sends between "loaded" and its answer, and the request's
bookkeeping (InFlight) shows it as its phase, kept while it saves and gone once it ended. The
worker's own reports are asserted on the real tiny FLUX.1 in
unit/generate/test_generation_load_cancel.py; here the worker's messages are put in its pipe
beforehand (no process is started)."""

from __future__ import annotations

from typing import Any

import pytest

from lorastudio.errors import GenerationCancelled
from lorastudio.jobs.generation_process import GenerationProcess, Spawner
from lorastudio.jobs.generation_requests import GENERATING, LOADING, QUEUED, SAVING, InFlight
from lorastudio.jobs.generation_worker import GenerationJob

JOB = GenerationJob(source="m", family="flux", revision=None, prompt="x", seed=0, steps=3, width=32, height=32,
                    guidance=None, loras=(), out_path="/nowhere.png")  # fmt: skip


def _answered(*messages: Any) -> GenerationProcess:
    """A worker handle whose child end already holds `messages` (never started)."""
    spawner = Spawner()
    process = GenerationProcess(spawner)
    for message in messages:
        process._child_conn.send(message)
    spawner.close()
    return process


def test_call_tells_each_step_the_worker_reports_and_returns_its_answer() -> None:
    ok = {"width": 32, "height": 32, "seconds": 0.1, "loaded": True}
    process = _answered(("loaded", True), ("step", 1, 3), ("step", 2, 3), ("step", 3, 3), ("ok", ok))
    seen: list[tuple[int, int]] = []
    assert process.call(JOB, lambda done, of: seen.append((done, of))) == ok
    assert seen == [(0, 3), (1, 3), (2, 3), (3, 3)]  # 0: the pipeline ready, the steps asked
    quiet = _answered(("loaded", False), ("step", 1, 3), ("ok", ok))
    assert quiet.call(JOB) == ok  # no one listening: the steps are read past


def test_the_books_show_each_phase_of_a_request_then_forget_it() -> None:
    flight = InFlight()
    flight.admit("r", None)
    assert flight.progress("r") == (QUEUED, 0, 0)
    worker = _answered()
    flight.start_running("r", worker)
    assert flight.progress("r") == (LOADING, 0, 0)
    flight.stepped("r", 2, 20)
    assert flight.progress("r") == (GENERATING, 2, 20)
    flight.stop_running()
    flight.saving("r")
    assert flight.progress("r") == (SAVING, 2, 20)
    flight.stepped("r", 3, 20)  # a late report changes nothing once it saves
    assert flight.progress("r") == (SAVING, 2, 20)
    flight.finish("r")
    assert flight.progress("r") is None and len(flight) == 0

    flight.admit("c", None)
    flight.cancel("c")
    with pytest.raises(GenerationCancelled):
        flight.start_running("c", worker)
    assert flight.progress("c") == (QUEUED, 0, 0)
