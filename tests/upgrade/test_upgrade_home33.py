"""Session 33 upgrade audit, end to end (slow: ~3-4 min on 2 cores): a studio home built by the
code of the session's start (commit OLD, extracted with `git archive`; tests/upgrade/old_home33.py
under a team's umask 002: CLI runs finished, failed and killed, server runs finished and stopped,
an asynchronous generation, uploaded references, a caption job) is opened by this code, then
again by the old code (a user rolling back). This session's changes to the home: the run store's
`elapsed_s` column (RELIABILITY 1097), the generation records (1095), the name reservations
(1094, 1127) and the references' boot-clock ledger (1096). Skipped where the repository lacks the
old commit (a shallow clone)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from tests.polling import until
from tests.upgrade.old_tree import (
    build_old_home,
    renders_again,
    resumes_bitwise,
    run_cli,
    spawn_cli_train,
    use_old_home,
)

OLD = "50fed635"  # session 33's start
REPO = Path(__file__).resolve().parents[2]
OLD_RUNS = ["srv-stopped", "srv-done", "killed", "failed", "done32"]  # the run store's order, newest first
pytestmark = pytest.mark.slow


def _umask_002() -> None:
    os.umask(0o002)


@pytest.fixture(scope="module")
def old_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path]:
    root = tmp_path_factory.mktemp("upgrade33")
    return build_old_home(root, OLD, "old_home33.py", preexec=_umask_002)


@pytest.fixture
def home(old_home: tuple[Path, dict, Path], monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict, Path]:
    return use_old_home(old_home, monkeypatch)


def _cli(*args: str, src: Path = REPO / "src") -> subprocess.CompletedProcess:
    """The CLI of `src` (this code's by default) on the home, under umask 002 (a team's)."""
    return run_cli(*args, src=src, preexec=_umask_002)


def _listed(src: Path = REPO / "src") -> list[list[str]]:
    done = _cli("runs", "list", src=src)
    assert done.returncode == 0, done.stderr[-2000:]
    return [line.split("\t") for line in done.stdout.splitlines()[1:]]


def test_an_old_home_upgrades_and_rolls_back(home: tuple[Path, dict, Path]) -> None:
    from fastapi.testclient import TestClient

    from lorastudio.api.app import create_app
    from lorastudio.settings import get_settings

    folder, old, old_src_dir = home
    server = old["server"]
    assert old["runs"]["done32"]["rc"] == 0 and "injected failure" in old["runs"]["failed"]["err"], old[
        "runs"
    ]
    assert server["async"]["end"]["state"] == "done" and server["references"]["status"] == 201, server

    # this code's listings of the old home: the run store's order and statuses, no elapsed_s recorded
    rows = _listed()
    assert [r[4] for r in rows] == OLD_RUNS, rows
    assert [r[1] for r in rows] == ["stopped", "completed", "interrupted", "failed", "completed"], rows
    with TestClient(create_app(get_settings()), base_url="http://127.0.0.1") as client:
        runs = client.get("/api/runs").json()["runs"]
        assert [r["output_name"] for r in runs] == OLD_RUNS
        assert all(r["elapsed_s"] is None for r in runs), runs  # the old code measured none: the stamps
        for run in runs:
            for tail in ("", "/checkpoints", "/samples"):
                assert client.get(f"/api/runs/{run['id']}{tail}").status_code == 200, (run, tail)
        assert {lo["name"] for lo in client.get("/api/loras").json()["loras"]} >= {
            "done32",
            "srv-done",
            "srv-stopped",
        }
        assert len(client.get("/api/gallery").json()["images"]) == 4  # three and the async one
        gone = client.get("/api/generations/gen-old-async")  # sent to the old server: no record
        assert gone.status_code == 404 and "before" in gone.json()["detail"], gone.text
        assert [j["status"] for j in client.get("/api/captions").json()] == ["completed"]
        for ref in server["references"]["out"]["references"]:
            assert client.get(ref["url"]).status_code == 200, ref
        renders_again(client, old["gallery"])  # the old LoRAs: the same pixels
        # "train again" (the web's Clone) of an old server run, its name left to the default
        srv = next(r for r in runs if r["output_name"] == "srv-done")
        config = {
            k: v for k, v in client.get(f"/api/runs/{srv['id']}").json()["config"].items() if v is not None
        }
        del config["output_name"]
        started = client.post("/api/train/start", json={"config": config})
        assert started.status_code == 201, started.text
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            job = client.get("/api/train/status").json()["job"]
            if job["id"] == started.json()["id"] and job["status"] in ("completed", "failed", "stopped"):
                break
            time.sleep(0.25)
        assert job["status"] == "completed" and job["elapsed_s"] > 0, job
        again = job["output_name"]
    resumes_bitwise(folder, old["runs"], ("plain",))  # an old checkpoint: bitwise the old uninterrupted run
    pruned = _cli("cache", "prune", "--max-gb", "0")
    assert pruned.returncode == 0, pruned.stderr[-2000:]

    # a reservation the old code could not make: a default-named CLI run killed while it held it
    config = {k: v for k, v in old["killed"]["raw"].items() if k != "output_name"}
    path = folder.parent / "long-default.json"
    path.write_text(json.dumps(config))
    proc = spawn_cli_train(path, REPO / "src")
    reserved = until(lambda: list((folder / "outputs").glob(".*.reserved")), 300, "the run's reservation")
    time.sleep(3)  # into its run
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(reserved) == 1 and reserved[0].exists(), reserved  # type: ignore[arg-type]

    # roll back: the old code lists the store with the new column, the new runs and the reservation
    rows = _listed(old_src_dir)
    assert again in [r[4] for r in rows] and [r[4] for r in rows][-5:] == OLD_RUNS, rows
    assert not any(r[4].startswith(".") for r in rows), rows
    shown = _cli("runs", "show", next(r[0] for r in rows if r[4] == again), src=old_src_dir)
    assert shown.returncode == 0 and "completed" in shown.stdout, shown.stderr[-2000:]
    loras = _cli("lora", "list", again, src=old_src_dir)
    assert loras.returncode == 0, loras.stderr[-2000:]
    served = _cli("cache", "ls", src=old_src_dir)
    assert served.returncode == 0, served.stderr[-2000:]
    # and up again: this code's server start removes the killed run's reservation
    with TestClient(create_app(get_settings()), base_url="http://127.0.0.1"):
        until(lambda: not reserved[0].exists(), 60, "the reservation swept")  # type: ignore[index]
