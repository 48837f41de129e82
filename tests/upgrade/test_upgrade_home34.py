"""Session 34 upgrade audit, end to end (slow: ~2.5 min on 2 cores): a studio home built by the
code of the session's start (commit OLD, extracted with `git archive`; tests/upgrade/old_home34.py:
session 33's fixture home and a server of that code killed outright, its lock file left) is opened
by this code (every listing, the runs' pages by cursor, an old generation's record, the time
forecast from the old runs' records, "train again", a resume, `du`, a CLI run killed holding its
owner lock), then by the old code again (its CLI and its server on the lock file with an epoch,
this code's generation records and time records), then by this code once more. This session's
changes to the home: the lock's epoch and the generation records' `.epoch` (RELIABILITY 1182,
1250), the run-owner locks (1195, 1251), the run list's cursor (1221), the CPU runs' new timing
fields (1210-1214). Skipped where the repository lacks the old commit (a shallow clone)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from tests.polling import until
from tests.upgrade.old_tree import (
    build_old_home,
    cli_env,
    resumes_bitwise,
    run_cli,
    spawn_cli_train,
    use_old_home,
)

OLD = "04d52130"  # session 34's start
REPO = Path(__file__).resolve().parents[2]
OLD_RUNS = ["srv-stopped", "srv-done", "killed", "failed", "done32"]  # the run store's order, newest first
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def old_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path]:
    root = tmp_path_factory.mktemp("upgrade34")
    return build_old_home(root, OLD, "old_home34.py")


@pytest.fixture
def home(old_home: tuple[Path, dict, Path], monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict, Path]:
    return use_old_home(old_home, monkeypatch)


def _cli(*args: str, src: Path = REPO / "src") -> subprocess.CompletedProcess:
    """The CLI of `src` (this code's by default) on the home."""
    return run_cli(*args, src=src)


def _listed(src: Path = REPO / "src") -> list[list[str]]:
    done = _cli("runs", "list", src=src)
    assert done.returncode == 0, done.stderr[-2000:]
    return [line.split("\t") for line in done.stdout.splitlines()[1:]]


def _ended(client, job_id: str) -> dict:  # noqa: ANN001 (the app's TestClient)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        job = client.get("/api/train/status").json()["job"]
        if job["id"] == job_id and job["status"] in ("completed", "failed", "stopped", "interrupted"):
            return job
        time.sleep(0.25)
    raise AssertionError(f"run {job_id} did not end")


def _generated(get, rid: str) -> dict:  # noqa: ANN001 (a GET of a path, answering JSON)
    return until(
        lambda: (s := get(f"/api/generations/{rid}")).get("state") in ("done", "failed") and s, 300, rid
    )


def _gen_body(model: str, rid: str, seed: int) -> dict:
    return {"family": "flux", "base_model": model, "prompt": "a red square", "seed": seed, "steps": 2,
            "width": 32, "height": 32, "loras": [], "request_id": rid}  # fmt: skip


def _old_server(src: Path, model: str) -> dict:
    """The old code's `serve` on the home: this code's records read, a generation made, stopped."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    env = {**cli_env(src), "LORASTUDIO_STANDBY_WORKER": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "lorastudio.cli", "serve", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip

    def call(path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url + path, data=data, headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as err:
            return {"http": err.code, **json.loads(err.read() or b"{}")}

    try:
        until(lambda: _answers(url), 240, "the old server up")
        out = {"new": call("/api/generations/gen-new"), "runs": call("/api/runs")}
        out["sent"] = call("/api/generations", _gen_body(model, "gen-back", 4))
        out["back"] = _generated(call, "gen-back")
        out["again"] = call("/api/generations", _gen_body(model, "gen-new", 5))  # refused: recorded
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    return out


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/api/runs", timeout=5):
            return True
    except OSError:
        return False


def test_an_old_home_upgrades_rolls_back_and_upgrades_again(home: tuple[Path, dict, Path]) -> None:
    from fastapi.testclient import TestClient

    from lorastudio.api.app import create_app
    from lorastudio.settings import get_settings

    folder, old, old_src_dir = home
    assert old["killed_server"]["up"] and '"kind": "server"' in old["killed_server"]["lock"], old[
        "killed_server"
    ]
    assert old["server"]["async"]["end"]["state"] == "done", old["server"]
    rows = _listed()
    assert [r[4] for r in rows] == OLD_RUNS, rows
    assert [r[1] for r in rows] == ["stopped", "completed", "interrupted", "failed", "completed"], rows
    du = _cli("du")
    assert du.returncode == 0 and "outputs" in du.stdout, du.stderr[-2000:]

    with TestClient(
        create_app(get_settings()), base_url="http://127.0.0.1"
    ) as client:  # the killed one's lock
        assert '"epoch"' in (folder / "lorastudio.lock").read_text()
        whole = client.get("/api/runs").json()
        assert [r["output_name"] for r in whole["runs"]] == OLD_RUNS and whole["total"] == 5
        paged, cursor = [], None
        while True:  # pages of two by their cursor: the same runs, none twice
            page = client.get(
                "/api/runs", params={"limit": 2, **({"cursor": cursor} if cursor else {})}
            ).json()
            paged += page["runs"]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert [r["id"] for r in paged] == [r["id"] for r in whole["runs"]]
        for run in whole["runs"]:
            for tail in ("", "/checkpoints", "/samples"):
                assert client.get(f"/api/runs/{run['id']}{tail}").status_code == 200, (run, tail)
        assert {lo["name"] for lo in client.get("/api/loras").json()["loras"]} >= {"done32", "srv-done"}
        assert len(client.get("/api/gallery").json()["images"]) == 4
        kept = client.get("/api/generations/gen-old-async")  # the old server's record (no .epoch): kept
        assert kept.status_code == 200 and kept.json()["state"] == "done", kept.text
        assert [j["status"] for j in client.get("/api/captions").json()] == ["completed"]
        srv = next(r for r in whole["runs"] if r["output_name"] == "srv-done")
        config = {
            k: v for k, v in client.get(f"/api/runs/{srv['id']}").json()["config"].items() if v is not None
        }
        del config["output_name"]
        forecast = client.post("/api/train/preflight", json={"config": config})
        assert forecast.status_code == 200 and forecast.json()["time"]["total_s"] > 0, forecast.text
        started = client.post("/api/train/start", json={"config": config})  # "train again"
        assert started.status_code == 201, started.text
        job = _ended(client, started.json()["id"])
        assert job["status"] == "completed" and job["elapsed_s"] > 0, job
        again = job["output_name"]
        assert client.post("/api/generations", json=_gen_body(old["model"], "gen-new", 3)).status_code in (
            200,
            201,
            202,
        )
        assert _generated(lambda p: client.get(p).json(), "gen-new")["state"] == "done"
    resumes_bitwise(folder, old["runs"], ("plain",))

    # a CLI run of this code killed while it holds its owner lock
    config = {**old["killed"]["raw"], "output_name": "new-killed"}
    path = folder.parent / "new-killed.json"
    path.write_text(json.dumps(config))
    proc = spawn_cli_train(path, REPO / "src")
    owners = folder / "cache" / "run-owners"
    until(lambda: list((folder / "outputs" / "new-killed").glob("checkpoints/step-*")), 300, "a checkpoint")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(list(owners.glob("*.lock"))) == 1

    # roll back: the old CLI and server on this code's lock (an epoch), records and timing fields
    rows = _listed(old_src_dir)
    assert [r[4] for r in rows][:2] == ["new-killed", again] and rows[0][1] == "interrupted", rows
    assert _cli("cache", "ls", src=old_src_dir).returncode == 0
    served = _old_server(old_src_dir, old["model"])
    assert served["new"]["state"] == "done" and served["back"]["state"] == "done", served
    assert served["again"].get("http") == 409, served["again"]  # it refuses an id recorded here

    # forward again: every record kept (fix 1250), the killed run's lock file gone (fix 1251)
    get_settings.cache_clear()
    with TestClient(create_app(get_settings()), base_url="http://127.0.0.1") as client:
        for rid in ("gen-old-async", "gen-new", "gen-back"):
            answer = client.get(f"/api/generations/{rid}")
            assert answer.status_code == 200 and answer.json()["state"] == "done", (rid, answer.text)
        assert client.get("/api/runs").json()["total"] == 7
        assert not list(owners.glob("*.lock")), list(owners.iterdir())
