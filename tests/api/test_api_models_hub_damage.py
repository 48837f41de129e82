"""GET /api/models and `lorastudio models list` with a hub cache whose refs are damaged (fix 260):
a FIFO ref, a ref that is a folder, one of garbage. The old listing (huggingface_hub's
scan_cache_dir) blocked on the FIFO for good; each read here runs in a thread that is released
after the wait (the FIFO opened for writing), so the old code fails instead of hanging the suite.
No /dev/zero or huge ref here: the old code would read it in this process (test_hubscan.py covers
those in a memory-capped child)."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.cli_runner import run_cli_streams

HANG_S = 60  # far past what listing three repos takes even on a loaded host
GOOD = "a" * 40


def _damaged_cache(root: Path) -> Path:
    for name, ref in (
        ("ok--good", GOOD),
        ("bad--fifo", None),
        ("bad--folder", None),
        ("bad--garbage", "x\n"),
    ):
        storage = root / f"models--{name}"
        (storage / "snapshots" / GOOD).mkdir(parents=True)
        (storage / "snapshots" / GOOD / "model_index.json").write_text("{}")
        (storage / "refs").mkdir()
        if ref is not None:
            (storage / "refs" / "main").write_text(ref)
    os.mkfifo(root / "models--bad--fifo" / "refs" / "main")
    (root / "models--bad--folder" / "refs" / "main").mkdir()
    return root / "models--bad--fifo" / "refs" / "main"


def _bounded(fifo: Path, call: Callable[[], Any]) -> Any:
    """call() in a thread; a reader the old code left blocked on the FIFO is released after
    HANG_S and the test fails."""
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["value"] = call()
        except Exception as err:  # noqa: BLE001 (reported by the assertion below)
            done["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_S)
    blocked = thread.is_alive()
    with contextlib.suppress(OSError):  # no reader waiting
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    thread.join()
    assert not blocked, "the hub cache listing blocked on a FIFO ref"
    assert "error" not in done, f"the listing raised {done.get('error')!r}"
    return done["value"]


HUB_REPOS = ["bad/fifo", "bad/folder", "bad/garbage", "ok/good"]  # a damaged ref costs the ref only


def test_api_models_lists_a_hub_cache_with_damaged_refs(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    fifo = _damaged_cache(tmp_path / "hf-cache")
    answer = _bounded(fifo, lambda: client.get("/api/models"))
    assert answer.status_code == 200, answer.text
    hub = sorted(m["name"] for m in answer.json() if m["source"] == "hub-cache")
    assert hub == HUB_REPOS


def test_cli_models_list_with_damaged_refs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("LORASTUDIO_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    fifo = _damaged_cache(tmp_path / "hf-cache")
    code, out, err = _bounded(fifo, lambda: run_cli_streams(capsys, monkeypatch, "models", "list", "--json"))
    assert code == 0, err
    assert sorted(m["name"] for m in json.loads(out) if m["source"] == "hub-cache") == HUB_REPOS
