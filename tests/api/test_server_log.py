"""The server's own log lines reach its console (api/server_log.py)."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.polling import until
from tests.ports import start_listening

from lorastudio.api.server_log import LOGGER, install_server_logging


@pytest.fixture
def fresh_logger() -> Iterator[logging.Logger]:
    """The `lorastudio` logger as this process had it, restored after the test (other tests'
    caplog needs its records to propagate)."""
    logger = logging.getLogger(LOGGER)
    saved = (list(logger.handlers), logger.level, logger.propagate)
    logger.handlers = []
    yield logger
    logger.handlers, logger.level, logger.propagate = saved[0], saved[1], saved[2]


def test_info_lines_are_printed_once_in_uvicorns_style_with_tokens_hidden(
    fresh_logger: logging.Logger,
) -> None:
    out = io.StringIO()
    install_server_logging(out)
    install_server_logging(out)  # a second call adds no second handler
    logging.getLogger("lorastudio.jobs").info("standby worker %s ready: its imports took %.1f s", 42, 3.25)
    logging.getLogger("lorastudio.jobs.hardware").debug("not shown")
    logging.getLogger("lorastudio.api").warning("GET %s refused", "/api/x?token=s3cret")
    lines = out.getvalue().splitlines()
    assert [_STAMP.sub("", line, count=1) for line in lines] == [
        "INFO:     lorastudio.jobs: standby worker 42 ready: its imports took 3.2 s",
        "WARNING:  lorastudio.api: GET /api/x?token=*** refused",
    ]
    assert all(_STAMP.match(line) for line in lines), lines  # each with its time (RELIABILITY 1098)


_STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}[+-]\d{4} ")  # worker_log.stamp's, and a space


def test_uvicorns_own_lines_carry_the_time_with_its_offset_as_a_runs_log_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`lorastudio serve`'s console: uvicorn's start and access lines and ours begin with the
    local time and its UTC offset (RELIABILITY 1098: the server's own lines carried no time; a
    run's log had it since fix 1027). TZ=America/New_York: the December offset is -0500."""
    import time

    from lorastudio.api.server_log import uvicorn_log_config

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        config = uvicorn_log_config()
        when = 1796601600.25  # 2026-12-07 00:00:00.250 UTC
        out = {}
        for name, args in (("default", ("Uvicorn running on %s", ("http://127.0.0.1:7860",))), (
            "access", ('%s - "%s %s HTTP/%s" %d', ("127.0.0.1:5", "GET", "/api/info", "1.1", 200))
        )):  # fmt: skip
            spec = dict(config["formatters"][name])
            formatter = spec.pop("()")(**spec)
            record = logging.LogRecord("uvicorn", logging.INFO, __file__, 1, args[0], args[1], None)
            record.created = when
            out[name] = formatter.format(record)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert out["default"] == "2026-12-06 19:00:00,250-0500 INFO:     Uvicorn running on http://127.0.0.1:7860"
    assert out["access"].startswith(
        '2026-12-06 19:00:00,250-0500 INFO:     127.0.0.1:5 - "GET /api/info HTTP/1.1" 200'
    )


def test_a_served_studio_prints_its_standby_workers_lines(tmp_path: Path) -> None:
    """`lorastudio serve` (a real process): the standby worker's INFO line is on its console (it
    was dropped: no handler for the lorastudio loggers)."""
    env = {**os.environ, "LORASTUDIO_HOME": str(tmp_path / "home"), "LORASTUDIO_STANDBY_WORKER": "1"}
    cmd = [sys.executable, "-c", "from lorastudio.cli.app import main; main()", "serve", "--port"]
    lines: list[str] = []

    def start(port: int) -> subprocess.Popen:
        proc = subprocess.Popen(
            [*cmd, str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()  # type: ignore[arg-type]
        return proc

    server, _ = start_listening(start)
    try:
        until(lambda: any("lorastudio.jobs: standby worker spawned (pid" in x for x in lines), 60, "the line")
    finally:
        server.terminate()
        server.wait(30)
    assert any(
        _STAMP.sub("", x).startswith("INFO:     lorastudio.jobs: standby worker spawned") for x in lines
    ), lines
