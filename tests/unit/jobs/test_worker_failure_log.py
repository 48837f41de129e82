"""A training worker's unexpected failure on the server's console: its traceback once
(RELIABILITY 1900). worker_main logged it (the run's log and, through the log's tee, the
terminal), then raised it on to the spawn bootstrap, which printed it again: two tracebacks of
one failure on `lorastudio serve`'s console. Run in-process with the child's set-up, channel,
prefetch and engine replaced (a spawned worker costs seconds of imports); `os._exit` stands
for the process's end."""

from __future__ import annotations

import logging
import os
import sys
import types
from typing import Any

import pytest

from lorastudio.jobs import worker
from lorastudio.training.events import Error


class _Exited(Exception):
    """os._exit(code) in the test: the process would end here."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class _Channel:
    """WorkerChannel's side the failure path uses: the events it would send."""

    def __init__(self, *args: Any) -> None:
        self.events: list[Any] = []
        self.terminal_sent = False
        self.closed = False

    def emit(self, event: Any) -> None:
        self.events.append(event)

    def should_stop(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True


def test_an_unexpected_failure_is_told_once_and_ends_the_process_with_1(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    channels: list[_Channel] = []

    def channel(*args: Any) -> _Channel:
        channels.append(_Channel())
        return channels[-1]

    def train(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("boom in the engine")

    def exit_(code: int) -> None:
        raise _Exited(code)

    monkeypatch.setattr(worker, "prepare_child", lambda args: None)
    monkeypatch.setattr(worker, "start_log", lambda args: None)
    monkeypatch.setattr(worker, "start_prefetch", lambda config, settings: None)
    monkeypatch.setattr(worker, "freeze_imports", lambda: 0)
    monkeypatch.setattr(worker, "WorkerChannel", channel)
    monkeypatch.setitem(sys.modules, "lorastudio.training.loop", types.SimpleNamespace(train=train))
    monkeypatch.setattr(os, "_exit", exit_)
    args = types.SimpleNamespace(
        config=types.SimpleNamespace(model_dump=dict),
        settings=None,
        resume=None,
        started_at=None,
        job_id="j1",
    )
    with caplog.at_level(logging.INFO, logger="lorastudio.worker"), pytest.raises(_Exited) as ended:
        worker.worker_main(args, None, None, None)  # type: ignore[arg-type]
    # ended by the worker itself with 1 (before: RuntimeError raised on, its traceback printed again)
    assert ended.value.code == 1
    [sent] = channels[0].events
    assert isinstance(sent, Error) and sent.message == "RuntimeError: boom in the engine"
    assert channels[0].closed  # the Error event flushed to the server before the exit
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert [r.getMessage() for r in tracebacks] == ["the worker failed"]
    assert "boom in the engine" in str(tracebacks[0].exc_info[1])


def test_a_failed_runs_error_is_an_error_line_in_words(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """RELIABILITY 1905: the run's log held a run's failure as an INFO line of JSON (`error:
    {"message":"dataset folder not found: ...\\n  - ...: does not exist"}`), its newlines escaped,
    and, INFO going to the file only, the server's console showed nothing of it. Now an ERROR
    line in words (the log's tee copies it to the console); the other events stay INFO JSON."""
    import queue

    from lorastudio.config import TrainConfig
    from lorastudio.settings import Settings
    from lorastudio.training.events import RunWarning

    config = TrainConfig.model_validate(
        {"family": "flux", "base_model": "org/model", "data_dir": str(tmp_path / "d"), "output_name": "o"}
    )
    args = types.SimpleNamespace(generation=1, settings=Settings(home=tmp_path / "home"), config=config)
    channel = worker.WorkerChannel(args, queue.Queue(), None, None)  # type: ignore[arg-type]
    cause = "dataset folder not found: /d\n  - /d: does not exist"
    with caplog.at_level(logging.INFO, logger="lorastudio.worker"):
        channel.emit(RunWarning(step=3, message="a warning"))
        channel.emit(Error(message=cause))
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "lorastudio.worker"]
    assert said == [
        ("INFO", 'warning: {"step":3,"message":"a warning"}'),
        ("ERROR", f"error: {cause}"),
    ]
    assert channel.terminal_sent
