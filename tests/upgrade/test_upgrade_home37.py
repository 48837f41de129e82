"""Session 37 upgrade audit, end to end (slow: 3 to 8 min on 2 shared cores, most of it building
the home): a studio home built by the code of the session's start (commit OLD, extracted with `git
archive`; tests/upgrade/old_home37.py: session 34's fixture home, a DoRA run stopped and resumed
by the old server (two records of one folder) and an EMA run previewing every step, stopped with
a checkpoint) is opened by this code: the runs' listing with and without `q` (RELIABILITY 1460)
and `shared_with` on the old records (1462), every run's pages, the DoRA run resumed bitwise (its
plan no longer said fused: 1520, the engine never fused it), the EMA run resumed to its end (its
newest preview's EMA weights kept in samples/: 1492), "train again"; then by the old code again
(its `runs list`, its LoRA and sample pages of the EMA run whose samples/ holds this code's file,
a resume of the DoRA run from this code's losses.bin); then by this code once more (the listings,
the delete of a record whose folder another keeps). Skipped where the repository lacks the old
commit (a shallow clone)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.upgrade.old_tree import build_old_home, cli_env, run_cli, use_old_home
from tests.upgrade.test_upgrade_home35 import _ended, _pages

from stop_at import stop_at

OLD = "a6793494"  # session 37's start
REPO = Path(__file__).resolve().parents[2]
OLD_RUNS = ["dora37", "ema37", "dora37", "srv-stopped", "srv-done", "killed", "failed", "done32"]  # fmt: skip
pytestmark = pytest.mark.slow

OLD_APP = (  # the old app's answers: GET each path of argv[1:] -> [status, json]
    "import json, sys; from fastapi.testclient import TestClient; from lorastudio.api.app import create_app;"
    " from lorastudio.settings import get_settings\n"
    "with TestClient(create_app(get_settings()), base_url='http://127.0.0.1') as c:\n"
    "    print(json.dumps([[r.status_code, r.json()] for r in (c.get(p) for p in sys.argv[1:])]))"
)
RESUME = (  # the old code's train() resuming run folder argv[2] with config argv[1] to its end
    "import json, sys; from pathlib import Path; from lorastudio.config import TrainConfig;"
    " from lorastudio.training.loop import train\n"
    "ev = []\n"
    "r = train(TrainConfig.model_validate(json.loads(sys.argv[1])), ev.append, device='cpu',"
    " resume=Path(sys.argv[2]))\n"
    "print(json.dumps([list(r.losses), [e.message for e in ev if e.type == 'warning']]))"
)


@pytest.fixture(scope="module")
def old_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path]:
    root = tmp_path_factory.mktemp("upgrade37")
    return build_old_home(root, OLD, "old_home37.py")


@pytest.fixture
def home(old_home: tuple[Path, dict, Path], monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict, Path]:
    return use_old_home(old_home, monkeypatch)


def _old_python(code: str, *args: str, src: Path) -> object:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=cli_env(src), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _names(src: Path) -> list[str]:
    done = run_cli("runs", "list", src=src)
    assert done.returncode == 0, done.stderr[-2000:]
    return [line.split("\t")[4] for line in done.stdout.splitlines()[1:]]


def test_an_old_home_upgrades_rolls_back_and_upgrades_again(home: tuple[Path, dict, Path]) -> None:
    from fastapi.testclient import TestClient

    from lorastudio.api.app import create_app
    from lorastudio.config import TrainConfig
    from lorastudio.settings import get_settings
    from lorastudio.training.loop import train

    folder, old, old_src_dir = home
    s37 = old["s37"]
    dora, ema = s37["dora"], s37["ema"]
    assert dora["end"]["status"] == "stopped" and dora["resumed_end"]["status"] == "stopped", dora
    assert ema["end"]["status"] == "stopped", ema
    dora_ids = [dora["id"], dora["resumed_id"]]
    dora_at = dora["resumed_end"]["progress"]["step"]  # where the old resume stopped
    ema_steps = ema["raw"]["steps"]
    assert _names(REPO / "src") == OLD_RUNS
    with TestClient(create_app(get_settings()), base_url="http://127.0.0.1") as client:
        whole = client.get("/api/runs").json()
        assert [r["output_name"] for r in whole["runs"]] == OLD_RUNS
        assert _pages(client, "/api/runs", "runs") == (OLD_RUNS, len(OLD_RUNS))
        shared = {r["id"]: r["shared_with"] for r in whole["runs"]}
        assert shared.pop(dora_ids[0]) == dora_ids[1:] and shared.pop(dora_ids[1]) == dora_ids[:1]
        assert not any(shared.values()), shared  # every other old record: its folder alone
        for q, names in (("DORA37", ["dora37", "dora37"]), ("srv", ["srv-stopped", "srv-done"]),
                         ("tiny-flux", OLD_RUNS), (dora_ids[0][:12], ["dora37"]), ("nothing-such", [])):  # fmt: skip
            found = client.get("/api/runs", params={"q": q}).json()
            assert [r["output_name"] for r in found["runs"]] == names and found["total"] == len(names), q
        page = client.get(
            "/api/runs", params={"q": "srv", "limit": 1}
        ).json()  # the search paged by its cursor
        assert [r["output_name"] for r in page["runs"]] == ["srv-stopped"] and page["total"] == 2
        page = client.get("/api/runs", params={"q": "srv", "limit": 1, "cursor": page["next_cursor"]}).json()
        assert [r["output_name"] for r in page["runs"]] == ["srv-done"] and page["next_cursor"] is None
        detail = client.get(f"/api/runs/{dora_ids[1]}").json()
        assert detail["shared_with"] == dora_ids[:1] and detail["resume_step"] == dora_at
        for run in whole["runs"]:
            for tail in ("", "/checkpoints", "/samples", "/config", "/loras"):
                answer = client.get(f"/api/runs/{run['id']}{tail}")
                kept = (folder / "outputs" / run["output_name"]).is_dir()  # a failed fresh run's: removed
                assert answer.status_code == (404 if tail == "/loras" and not kept else 200), (run, tail)
        loras = [lo["name"] for lo in client.get("/api/loras").json()["loras"]]
        assert _pages(client, "/api/loras", "loras") == (loras, len(loras))
        assert {"dora37", "ema37", "srv-done", "done32"} <= set(loras), loras
        assert len(client.get("/api/gallery").json()["images"]) == 4
        kept = client.get("/api/generations/gen-old-async")  # the old server's asynchronous generation
        assert kept.status_code == 200 and kept.json()["state"] == "done", kept.text
        assert [j["status"] for j in client.get("/api/captions").json()] == ["completed"]
        sets = {d["name"] for d in client.get("/api/datasets").json()["datasets"]}
        assert {"shapes", "cards"} <= sets, sets
        # the EMA run resumed by this code to its end: its newest preview keeps its EMA weights
        resumed = client.post(f"/api/runs/{ema['id']}/resume", json={})
        assert resumed.status_code == 201, resumed.text
        assert _ended(client, resumed.json()["id"])["status"] == "completed"
        kept = sorted(p.name for p in (folder / "outputs" / "ema37" / "samples").glob("*.ema.*"))
        last = f"ema37-step-{ema_steps - 1:06d}.ema"  # the newest preview of a step without a checkpoint
        assert kept == [f"{last}.json", f"{last}.safetensors"], kept
        steps = client.get(f"/api/runs/{resumed.json()['id']}/loras").json()["loras"]
        ema_at = ema["end"]["progress"]["step"]  # the old checkpoint's
        assert [s["step"] for s in steps if s["weights"] == "ema"] == [ema_at, ema_steps - 1, ema_steps], (
            steps
        )
        config = client.get(f"/api/runs/{dora_ids[0]}").json()["config"]
        config = {k: v for k, v in config.items() if v is not None and k != "output_name"}
        again = client.post("/api/train/start", json={"config": config})  # "train again" of the DoRA run
        assert again.status_code == 201, again.text
        assert _ended(client, again.json()["id"])["status"] == "completed"
        plan = client.post("/api/train/preflight", json={"config": config})  # planned unfused, as run (1520)
        assert plan.status_code == 200 and plan.json()["plan"]["fuse_projections"] is False, plan.text[:2000]

    # the DoRA run (two old sessions) resumed by this code 3 steps: the uninterrupted losses
    run_dir = folder / "outputs" / "dora37"
    cfg = TrainConfig.model_validate(dora["raw"])
    warned, check = stop_at(dora_at + 3)
    ours = train(cfg, warned.append, check, device="cpu", resume=run_dir)
    assert ours.losses == dora["full_losses"][: dora_at + 3]
    assert not [e for e in warned if e.type == "warning"]

    # roll back: the old code lists this code's store and reads the EMA run this code wrote into
    listed = _names(REPO / "src")
    assert _names(old_src_dir) == listed and listed[1:] == ["ema37", *OLD_RUNS], (
        listed
    )  # "train again", the resume
    ema_id = resumed.json()["id"]
    answers = _old_python(OLD_APP, "/api/runs", f"/api/runs/{ema_id}/loras", f"/api/runs/{ema_id}/samples",
                          "/api/loras", src=old_src_dir)  # fmt: skip
    assert [status for status, _ in answers] == [200] * 4, answers
    assert [r["output_name"] for r in answers[0][1]["runs"]] == listed
    # the old code resumes the DoRA run to its end from this code's checkpoint and losses.bin
    rolled, warnings = _old_python(RESUME, json.dumps(dora["raw"]), str(run_dir), src=old_src_dir)
    assert rolled == dora["full_losses"] and not warnings, warnings

    # forward again: the listings, and the delete of a record whose folder another keeps
    get_settings.cache_clear()
    with TestClient(create_app(get_settings()), base_url="http://127.0.0.1") as client:
        runs = client.get("/api/runs").json()["runs"]
        assert [r["output_name"] for r in runs] == listed
        first = next(r for r in runs if r["id"] == dora_ids[0])
        assert first["shared_with"] == dora_ids[1:]
        gone = client.delete(f"/api/runs/{dora_ids[0]}")
        assert gone.status_code == 200, gone.text
        assert (run_dir / "checkpoints").is_dir()
        assert client.get(f"/api/runs/{dora_ids[1]}").json()["shared_with"] == []
        assert client.get("/api/runs", params={"q": "dora37"}).json()["total"] == 1
