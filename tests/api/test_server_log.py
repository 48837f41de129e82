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


def test_a_polls_access_line_is_printed_once_a_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    """RELIABILITY 1903: the web UI polls a model fetch, a caption job and a generation every
    second, and uvicorn's access log printed each poll: ~3,600 lines an hour of one request. A
    successful GET repeated from the same host (any port) within a minute is left out; every other
    request, an error status, another host or path, and the first after the minute are printed.
    Records as uvicorn's httptools / h11 protocols log them, through the installed filters."""
    from lorastudio.api import server_log
    from lorastudio.api.origin import install_log_redaction

    access = logging.getLogger(server_log.ACCESS_LOGGER)
    monkeypatch.setattr(access, "filters", [])
    monkeypatch.setattr(access, "handlers", [])
    monkeypatch.setattr(access, "propagate", False)
    monkeypatch.setattr(access, "level", logging.INFO)
    now = [1000.0]
    monkeypatch.setattr(server_log.time, "monotonic", lambda: now[-1])
    install_log_redaction()
    server_log.install_quiet_repeats()
    server_log.install_quiet_repeats()  # once
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    access.addHandler(handler)

    def request(second: float, method: str, path: str, status: int = 200, port: int = 50000) -> None:
        now.append(1000.0 + second)
        access.info('%s - "%s %s HTTP/%s" %d', f"127.0.0.1:{port}", method, path, "1.1", status)

    for second in range(5):  # a poll each second, a new connection each time
        request(second, "GET", "/api/models/fetch", port=50000 + second)
    request(5, "GET", "/api/models/fetch", status=500)
    request(6, "GET", "/api/models/fetch", status=500)
    request(7, "POST", "/api/generations")
    request(8, "POST", "/api/generations")
    request(9, "GET", "/api/captions/c1?token=a")
    request(10, "GET", "/api/captions/c1?token=b")  # the same line once the token is hidden
    now.append(1000.0 + 11)
    access.info('%s - "%s %s HTTP/%s" %d', "10.0.0.2:4000", "GET", "/api/models/fetch", "1.1", 200)
    request(61, "GET", "/api/models/fetch")
    lines = out.getvalue().splitlines()
    assert lines == [
        '127.0.0.1:50000 - "GET /api/models/fetch HTTP/1.1" 200',
        '127.0.0.1:50000 - "GET /api/models/fetch HTTP/1.1" 500',
        '127.0.0.1:50000 - "GET /api/models/fetch HTTP/1.1" 500',
        '127.0.0.1:50000 - "POST /api/generations HTTP/1.1" 200',
        '127.0.0.1:50000 - "POST /api/generations HTTP/1.1" 200',
        '127.0.0.1:50000 - "GET /api/captions/c1?token=*** HTTP/1.1" 200',
        '10.0.0.2:4000 - "GET /api/models/fetch HTTP/1.1" 200',
        '127.0.0.1:50000 - "GET /api/models/fetch HTTP/1.1" 200',  # a minute after the first
    ]
