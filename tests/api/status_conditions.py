"""Conditions the declared-statuses test (test_api_declared_statuses.py) puts the studio in to
provoke a route's rarer answers: every write failing as the kernel would (507 / 500), every
image-decode thread busy (503)."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from lorastudio import errors
from lorastudio.data import decode_slots


@contextmanager
def failing_writes(monkeypatch: pytest.MonkeyPatch, code: int) -> Iterator[None]:
    """Every `writing` block of the studio's writers fails as the kernel's `code` would (the real
    `writing` turns it into NoSpaceLeft / WriteFailed): a route that reaches a write answers it."""
    real = errors.writing

    @contextmanager
    def refused(what: str, path: object = None, *, show_file: bool = True) -> Iterator[None]:
        with real(what, path, show_file=show_file):
            raise OSError(code, os.strerror(code), str(path))
        yield  # never reached: the block above raises

    with monkeypatch.context() as patch:
        for module in list(sys.modules.values()):
            if getattr(module, "writing", None) is real:
                patch.setattr(module, "writing", refused)
        yield


@contextmanager
def decode_slots_busy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every decode thread busy and no room to wait (MAX_WAITING 0): a thumbnail is DecodeBusy."""
    release, running = threading.Event(), threading.Barrier(decode_slots.DECODE_SLOTS + 1)

    def hold() -> None:
        running.wait(5)
        release.wait(10)

    holders = [
        threading.Thread(target=decode_slots.run_decode, args=(hold,))
        for _ in range(decode_slots.DECODE_SLOTS)
    ]
    for thread in holders:
        thread.start()
    running.wait(5)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(decode_slots, "MAX_WAITING", 0)
            yield
    finally:
        release.set()
        for thread in holders:
            thread.join(10)
