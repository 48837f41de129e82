"""Session 35 upgrade audit, end to end (slow: ~3 min on 2 cores): a studio home built by the
code of the session's start (commit OLD, extracted with `git archive`; tests/upgrade/old_home35.py:
session 34's fixture home, a run keeping LoRA snapshots by rotation beside a lone sidecar, a
20,000-step metric history) is opened by this code (the runs' and LoRAs' pages by cursor, a long
run's chart points, status with `since`, the time forecast from the old records, a resume whose
history is carried once, "train again", a run started from an old run's LoRA with `init_lora`, a
run stopped with a checkpoint), then by the old code again (its `runs list`, a resume of this
code's checkpoint, this code's config download of a run without init_lora, and one with it, which
it refuses by name), then by this code once more. This session's changes to the home: init_lora in
configs, sidecars and headers (a null one left out of what is written, RELIABILITY 1330), metric
points picked in SQL (1290), the carried history in one transaction (1292), the LoRA list's pages
(total, next_cursor), status `since` on validation rounds (1294), lone snapshot sidecars swept
(1295). Skipped where the repository lacks the old commit (a shallow clone)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from tests.upgrade.old_tree import build_old_home, run_cli, use_old_home

OLD = "45437a2e"  # session 35's start
REPO = Path(__file__).resolve().parents[2]
OLD_RUNS = ["snaps", "srv-stopped", "srv-done", "killed", "failed", "done32"]  # newest first
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def old_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path]:
    root = tmp_path_factory.mktemp("upgrade35")
    return build_old_home(root, OLD, "old_home35.py")


@pytest.fixture
def home(old_home: tuple[Path, dict, Path], monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict, Path]:
    return use_old_home(old_home, monkeypatch)


def _cli(*args: str, src: Path = REPO / "src") -> subprocess.CompletedProcess:
    return run_cli(*args, src=src)


def _names(src: Path = REPO / "src") -> list[str]:
    done = _cli("runs", "list", src=src)
    assert done.returncode == 0, done.stderr[-2000:]
    return [line.split("\t")[4] for line in done.stdout.splitlines()[1:]]


def _ended(client, job_id: str, stop_at: int | None = None) -> dict:  # noqa: ANN001 (the app's TestClient)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        job = client.get("/api/train/status").json()["job"]
        step = (job.get("progress") or {}).get("step") or 0
        if stop_at is not None and job["id"] == job_id and job["status"] == "running" and step >= stop_at:
            client.post("/api/train/stop", json={"save": True, "job_id": job_id})
            stop_at = None
        if job["id"] == job_id and job["status"] in ("completed", "failed", "stopped", "interrupted"):
            return job
        time.sleep(0.05)
    raise AssertionError(f"run {job_id} did not end")


def _pages(client, path: str, key: str) -> tuple[list[str], int]:  # noqa: ANN001
    """Every item's name of a paged listing by its cursor (pages of two) and its total."""
    names, cursor = [], None
    while True:
        page = client.get(path, params={"limit": 2, **({"cursor": cursor} if cursor else {})}).json()
        names += [item.get("output_name") or item["name"] for item in page[key]]
        if (cursor := page["next_cursor"]) is None:
            return names, page["total"]


def test_an_old_home_upgrades_rolls_back_and_upgrades_again(home: tuple[Path, dict, Path]) -> None:
    from fastapi.testclient import TestClient

    from lorastudio.api.app import create_app
    from lorastudio.settings import get_settings

    folder, old, old_src_dir = home
    assert old["snaps"]["rc"] == 0 and old["snaps"]["kept"][-1] == "snaps-step-000005.safetensors", old[
        "snaps"
    ]
    assert _names() == OLD_RUNS
    with TestClient(create_app(get_settings()), base_url="http://127.0.0.1") as client:
        whole = client.get("/api/runs").json()
        assert [r["output_name"] for r in whole["runs"]] == OLD_RUNS
        assert _pages(client, "/api/runs", "runs") == (OLD_RUNS, 6)
        loras = client.get("/api/loras").json()
        assert _pages(client, "/api/loras", "loras") == (
            [lo["name"] for lo in loras["loras"]],
            loras["total"],
        )
        assert {"snaps", "done32", "srv-done"} <= {lo["name"] for lo in loras["loras"]}
        steps = [s["step"] for s in client.get("/api/loras/snaps/steps").json()["loras"]]
        assert steps == [4, 5, 6]  # the lone sidecar of step 2 is no snapshot
        runs = {r["output_name"]: r for r in whole["runs"]}
        for run in whole["runs"]:
            for tail in ("", "/checkpoints", "/samples", "/config"):
                assert client.get(f"/api/runs/{run['id']}{tail}").status_code == 200, (run, tail)
        points = client.get(f"/api/runs/{runs['done32']['id']}").json()["metrics"]
        assert len(points) == 2000 and (points[0]["step"], points[-1]["step"]) == (1, old["long"]["points"])
        assert len(client.get("/api/gallery").json()["images"]) == 4
        assert [j["status"] for j in client.get("/api/captions").json()] == ["completed"]

        stopped = runs["srv-stopped"]["id"]  # resumed: the old record's two points carried once
        resumed = client.post(f"/api/runs/{stopped}/resume", json={})
        assert resumed.status_code == 201, resumed.text
        job = _ended(client, resumed.json()["id"])
        assert job["status"] == "completed", job
        steps = [p["step"] for p in client.get(f"/api/runs/{job['id']}").json()["metrics"]]
        assert steps == list(range(1, 401)), steps[:10]
        since = client.get("/api/train/status", params={"since": 398}).json()["job"]
        assert [p["step"] for p in since["metrics"]] == [399, 400] and since["validation"] == []

        config = {k: v for k, v in client.get(f"/api/runs/{runs['srv-done']['id']}").json()["config"].items()}
        config = {k: v for k, v in config.items() if v is not None and k != "output_name"}
        forecast = client.post("/api/train/preflight", json={"config": config})
        assert forecast.status_code == 200 and forecast.json()["time"]["total_s"] > 0, forecast.text
        started = client.post("/api/train/start", json={"config": config})  # "train again"
        assert started.status_code == 201, started.text
        again = _ended(client, started.json()["id"])
        assert again["status"] == "completed", again
        init = {k: v for k, v in config.items() if k not in ("lora_rank", "lora_alpha")}
        started = client.post(
            "/api/train/start", json={"config": {**init, "init_lora": "done32", "output_name": "init"}}
        )
        assert started.status_code == 201, started.text
        assert _ended(client, started.json()["id"])["status"] == "completed"
        sidecar = json.loads((folder / "outputs" / "init" / "init.json").read_text())
        assert (
            sidecar["init_lora"]["file"] == "done32.safetensors"
            and sidecar["config"]["init_lora"] == "done32"
        )
        started = client.post("/api/train/start", json={"config": {**config, "output_name": "new-stopped",
                                                                   "steps": 400, "save_every": 1}})  # fmt: skip
        assert _ended(client, started.json()["id"], stop_at=2)["status"] == "stopped"
        downloads = {}
        for name in (again["output_name"], "init"):
            run_id = next(r["id"] for r in client.get("/api/runs").json()["runs"] if r["output_name"] == name)
            downloads[name] = client.get(f"/api/runs/{run_id}/config").json()
    assert "init_lora" not in downloads[again["output_name"]] and downloads["init"]["init_lora"] == "done32"

    # roll back: the old code reads this code's store, resumes its checkpoint, takes its config file
    assert _names(old_src_dir)[:4] == ["new-stopped", "init", again["output_name"], "srv-stopped"]
    path = folder.parent / "again.json"
    path.write_text(json.dumps({**downloads[again["output_name"]], "output_name": "old-again"}))
    done = _cli("train", str(path), "--device", "cpu", src=old_src_dir)
    assert done.returncode == 0, done.stderr[-2000:]
    path.write_text(json.dumps({**downloads["init"], "output_name": "old-init"}))
    refused = _cli("train", str(path), "--device", "cpu", src=old_src_dir)  # a setting it does not know
    assert refused.returncode == 2 and "init_lora: unknown setting" in refused.stderr, refused.stderr[-2000:]
    ran = _cli(
        "train", "--resume", str(folder / "outputs" / "new-stopped"), "--device", "cpu", src=old_src_dir
    )
    assert ran.returncode == 0, ran.stderr[-2000:]

    # forward again: the old code's runs listed, the LoRAs paged, the resumed run's history once
    get_settings.cache_clear()
    assert _names()[:2] == ["new-stopped", "old-again"]
    with TestClient(create_app(get_settings()), base_url="http://127.0.0.1") as client:
        whole = client.get("/api/runs").json()
        assert _pages(client, "/api/runs", "runs") == (
            [r["output_name"] for r in whole["runs"]],
            whole["total"],
        )
        last = whole["runs"][0]
        steps = [p["step"] for p in client.get(f"/api/runs/{last['id']}").json()["metrics"]]
        assert last["status"] == "completed" and steps == list(range(1, 401)), (last, steps[:10])
        names = [lo["name"] for lo in client.get("/api/loras").json()["loras"]]
        assert {"old-again", "init", "new-stopped"} <= set(names), names
