"""A process's name in /proc (its `comm`: any bytes it gave itself, cut at 15 bytes, so a name
of accented letters may end mid-character) never stops the liveness checks or the umask read
that parse /proc/PID/stat and /proc/self/status (RELIABILITY 1031)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from lorastudio.file_modes import process_umask
from lorastudio.processes import process_alive, process_ending, start_token
from lorastudio.timings import process_started_at

COMM = Path("/proc/self/comm")


@pytest.fixture
def name_cut_mid_character() -> Iterator[None]:
    """This process named b"caf\\xc3" (the first byte of "é" alone) for the test."""
    if not COMM.exists():
        pytest.skip("no /proc here")
    before = COMM.read_bytes().rstrip(b"\n")
    COMM.write_bytes(b"caf\xc3")
    try:
        yield
    finally:
        COMM.write_bytes(before)


def test_a_process_whose_name_is_not_utf8_is_alive_and_its_umask_read(name_cut_mid_character: None) -> None:
    me = os.getpid()
    assert process_alive(me) and not process_ending(me)
    token = start_token(me)
    assert token is not None and token == start_token(me)
    assert process_started_at() is not None
    umask = os.umask(0o027)
    os.umask(umask)
    assert process_umask() == umask
    os.umask(0o027)
    try:
        assert process_umask() == 0o027  # read, not the 0o022 of a failed read
    finally:
        os.umask(umask)
