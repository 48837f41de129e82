"""Session 36 upgrade audit, end to end (slow: 3 to 10 min on 2 shared cores, most of it building the home): a studio home built by the
code of the session's start (commit OLD, extracted with `git archive`; tests/upgrade/old_home36.py:
session 35's fixture home and a run stopped at step 3,000 whose checkpoint holds every loss) is
opened by this code (the runs' and LoRAs' listings and pages, the LoRA list in the old code's
order, the previews by page, "train again", the long run resumed: its 3,000 losses carried whole
into losses.bin), then by the old code again (its `runs list` on a store with output_places; a
resume of this code's checkpoint, whose state.pt keeps only the newest 1,000 losses, and a
checkpoint of its own), then by this code once more (the losses the old code left out read back
from losses.bin: RELIABILITY 1440). This session's changes to the home: losses.bin (1340),
output_places (1342), the samples listing's pages (1341). Skipped where the repository lacks the
old commit (a shallow clone)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tests.upgrade.old_tree import build_old_home, cli_env, run_cli, use_old_home
from tests.upgrade.test_upgrade_home35 import _ended, _pages

from stop_at import stop_at

OLD = "38934123"  # session 36's start
REPO = Path(__file__).resolve().parents[2]
OLD_RUNS = ["long", "snaps", "srv-stopped", "srv-done", "killed", "failed", "done32"]  # newest first
pytestmark = pytest.mark.slow

LORA_NAMES = (  # the old app's LoRA list, in its order
    "import json; from fastapi.testclient import TestClient; from lorastudio.api.app import create_app;"
    " from lorastudio.settings import get_settings\n"
    "with TestClient(create_app(get_settings()), base_url='http://127.0.0.1') as c:\n"
    "    print(json.dumps([lo['name'] for lo in c.get('/api/loras').json()['loras']]))"
)
RESUME = (  # the old code's train() resuming argv[2] up to step argv[3] (stopped with save)
    "import json, sys; from pathlib import Path; from lorastudio.config import TrainConfig;"
    " from lorastudio.training.loop import train; from lorastudio.training.events import StopRequest\n"
    "ev = []\n"
    "def check():\n"
    "    done = [e for e in ev if e.type == 'progress']\n"
    "    return StopRequest(save=True) if done and done[-1].step >= int(sys.argv[3]) else None\n"
    "r = train(TrainConfig.model_validate(json.loads(sys.argv[1])), ev.append, check, device='cpu',"
    " resume=Path(sys.argv[2]))\n"
    "print(json.dumps(list(r.losses)))"
)


@pytest.fixture(scope="module")
def old_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path]:
    root = tmp_path_factory.mktemp("upgrade36")
    return build_old_home(root, OLD, "old_home36.py")


@pytest.fixture
def home(old_home: tuple[Path, dict, Path], monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict, Path]:
    return use_old_home(old_home, monkeypatch)


def _old_python(code: str, *args: str, src: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=cli_env(src), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def _names(src: Path) -> list[str]:
    done = run_cli("runs", "list", src=src)
    assert done.returncode == 0, done.stderr[-2000:]
    return [line.split("\t")[4] for line in done.stdout.splitlines()[1:]]


def _state(run_dir: Path, step: int) -> dict:
    return torch.load(run_dir / "checkpoints" / f"step-{step:06d}" / "state.pt", weights_only=True)


def test_an_old_home_upgrades_rolls_back_and_upgrades_again(home: tuple[Path, dict, Path]) -> None:
    from fastapi.testclient import TestClient

    from lorastudio.api.app import create_app
    from lorastudio.config import TrainConfig
    from lorastudio.settings import get_settings
    from lorastudio.training.loop import train
    from lorastudio.training.resume.loss_record import RECORD_KEY, WINDOW

    folder, old, old_src_dir = home
    long, n = old["long"], len(old["long"]["losses"])
    assert long.get("status") == "stopped" and n == long["step"] >= 3000, {
        k: long.get(k) for k in ("status", "step")
    }
    assert all(math.isfinite(x) for x in long["losses"])
    old_loras = json.loads(_old_python(LORA_NAMES, src=old_src_dir))
    assert _names(REPO / "src") == OLD_RUNS
    with TestClient(create_app(get_settings()), base_url="http://127.0.0.1") as client:
        whole = client.get("/api/runs").json()
        assert [r["output_name"] for r in whole["runs"]] == OLD_RUNS
        assert _pages(client, "/api/runs", "runs") == (OLD_RUNS, len(OLD_RUNS))
        loras = [lo["name"] for lo in client.get("/api/loras").json()["loras"]]
        assert loras == old_loras and _pages(client, "/api/loras", "loras") == (loras, len(loras))
        runs = {r["output_name"]: r for r in whole["runs"]}
        for run in whole["runs"]:
            for tail in ("", "/checkpoints", "/samples", "/config"):
                assert client.get(f"/api/runs/{run['id']}{tail}").status_code == 200, (run, tail)
        samples = f"/api/runs/{runs['long']['id']}/samples"
        every = [s["name"] for s in client.get(samples).json()["samples"]]
        paged, cursor = [], None
        while True:
            page = client.get(samples, params={"limit": 1, **({"cursor": cursor} if cursor else {})}).json()
            paged = [s["name"] for s in page["samples"]] + paged  # each page older than the one before
            if (cursor := page["next_cursor"]) is None:
                break
        assert len(every) >= 2 and paged == every, (paged, every)
        config = client.get(f"/api/runs/{runs['srv-done']['id']}").json()["config"]
        config = {k: v for k, v in config.items() if v is not None and k != "output_name"}
        started = client.post("/api/train/start", json={"config": config})  # "train again"
        assert started.status_code == 201, started.text
        assert _ended(client, started.json()["id"])["status"] == "completed"

    # the long run resumed by this code: every old loss carried whole into losses.bin
    run_dir = folder / "outputs" / "long"
    cfg = TrainConfig.model_validate(long["raw"])
    events, check = stop_at(n + 1)
    resumed = train(cfg, events.append, check, device="cpu", resume=run_dir)
    assert resumed.losses[:n] == long["losses"] and len(resumed.losses) == n + 1
    ours = _state(run_dir, n + 1)
    assert len(ours["losses"]) == WINDOW and ours[RECORD_KEY]["count"] == n + 1
    assert (run_dir / "losses.bin").stat().st_size == (n + 1) * 8

    # roll back: the old code lists this code's store, resumes its checkpoint (the window only)
    listed = _names(REPO / "src")
    assert _names(old_src_dir) == listed and listed[1:] == OLD_RUNS, listed  # "train again" on top
    with TestClient(create_app(get_settings()), base_url="http://127.0.0.1") as client:
        loras = [lo["name"] for lo in client.get("/api/loras").json()["loras"]]
    assert json.loads(_old_python(LORA_NAMES, src=old_src_dir)) == loras and loras[0] == listed[0], loras
    fresh = {k: v for k, v in long["raw"].items() if not k.startswith("sample")}
    path = folder.parent / "old-again.json"  # a run the old code records beside output_places
    path.write_text(json.dumps({**fresh, "steps": 2, "output_name": "old-again"}))
    made = run_cli("train", str(path), "--device", "cpu", src=old_src_dir)
    assert made.returncode == 0, made.stderr[-2000:]
    raw = json.dumps(long["raw"])
    rolled = json.loads(_old_python(RESUME, raw, str(run_dir), str(n + 2), src=old_src_dir))
    assert (
        len(rolled) == WINDOW + 1 and rolled == resumed.losses[-WINDOW:] + rolled[-1:]
    )  # steps before: lost
    assert "loss_record" not in _state(run_dir, n + 2)

    # forward again: the losses the old code left out read back from losses.bin, none NaN
    warned: list = []
    again = train(cfg, warned.append, device="cpu", resume=run_dir)
    assert again.losses[:n] == long["losses"] and len(again.losses) == long["raw"]["steps"]
    assert all(math.isfinite(x) for x in again.losses), [i for i, x in enumerate(again.losses) if x != x][:5]
    assert not [e for e in warned if e.type == "warning"], [e for e in warned if e.type == "warning"]
    get_settings.cache_clear()
    with TestClient(create_app(get_settings()), base_url="http://127.0.0.1") as client:
        assert [r["output_name"] for r in client.get("/api/runs").json()["runs"]] == ["old-again", *listed]
        assert [lo["name"] for lo in client.get("/api/loras").json()["loras"]] == ["old-again", *loras]
