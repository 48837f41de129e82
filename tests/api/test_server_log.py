"""The server's own log lines reach its console (api/server_log.py)."""

from __future__ import annotations

import io
import logging
import os
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
    assert lines == [
        "INFO:     lorastudio.jobs: standby worker 42 ready: its imports took 3.2 s",
        "WARNING:  lorastudio.api: GET /api/x?token=*** refused",
    ]


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
    assert any(x.startswith("INFO:     lorastudio.jobs: standby worker spawned") for x in lines), lines
