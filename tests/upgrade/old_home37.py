"""Build a studio home with the code of session 37's start (run with PYTHONPATH=<old tree>/src):
session 34's fixture home (tests/upgrade/old_home34.py: CLI runs finished, failed and killed,
server runs finished and stopped, an asynchronous generation, uploaded references, a caption job,
a server killed outright), then through the old server a DoRA run stopped with a checkpoint and
resumed (two records of one folder, the resume stopped again) beside the same run uninterrupted
(its losses: what an exact resume must give), and an EMA run previewing every step, stopped with
a checkpoint at step 3 or a little later (its later previews fall on no checkpoint: this session's EMA preview file,
RELIABILITY 1492). `python old_home37.py HOME`; the summary goes to HOME/../old_home.json."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from old_home import _settings  # noqa: E402 (beside this file)
from old_home34 import _killed_server, build  # noqa: E402

DORA_STEPS, EMA_STEPS = 200, 12  # the server's stop comes a few steps after it is asked for (up to 8 seen)
ENDED = ("completed", "failed", "stopped", "interrupted", "cancelled")


def _session37(home: Path, model: Path) -> dict:
    """The DoRA run (stopped at step 2, resumed and stopped 2 steps on, of DORA_STEPS) and the EMA
    run (stopped at step 3 of EMA_STEPS), each stop a few steps late at most, through the old app; the DoRA run uninterrupted through the old train()."""
    from fastapi.testclient import TestClient

    from lorastudio.api.app import create_app
    from lorastudio.config import TrainConfig
    from lorastudio.settings import get_settings
    from lorastudio.training.loop import train

    shapes = home / "datasets" / "shapes"
    dora = _settings(model, shapes, "dora37", {"adapter": "dora", "steps": DORA_STEPS, "save_every": None})
    ema = _settings(model, shapes, "ema37", {"ema_decay": 0.9, "steps": EMA_STEPS, "save_every": None})
    ema.update(sample_every=1, sample_prompts=["a red square"], sample_steps=1)
    out: dict = {"dora": {"raw": dora}, "ema": {"raw": ema}}
    with TestClient(create_app(get_settings()), base_url="http://127.0.0.1") as client:

        def wait(job_id: str, stop_at: int | None) -> dict:
            job: dict = {}
            for _ in range(2400):
                job = client.get("/api/train/status").json().get("job") or {}
                step = (job.get("progress") or {}).get("step") or 0
                if stop_at is not None and job.get("status") == "running" and step >= stop_at:
                    client.post("/api/train/stop", json={"save": True, "job_id": job_id})
                    stop_at = None
                if job.get("id") == job_id and job.get("status") in ENDED:
                    return job
                time.sleep(0.2)
            return {"timeout": job}

        for key, raw, stop in (("dora", dora, 2), ("ema", ema, 3)):
            started = client.post("/api/train/start", json={"config": raw})
            out[key]["start"] = started.text
            if started.status_code == 201:
                out[key]["id"] = started.json()["id"]
                out[key]["end"] = wait(out[key]["id"], stop)
        again = client.post(f"/api/runs/{out['dora'].get('id')}/resume", json={})
        out["dora"]["resume"] = again.text
        if again.status_code == 201:
            out["dora"]["resumed_id"] = again.json()["id"]
            first = (out["dora"].get("end") or {}).get("progress") or {}
            out["dora"]["resumed_end"] = wait(again.json()["id"], (first.get("step") or 0) + 2)
        out["runs"] = client.get("/api/runs").json()
    full = train(TrainConfig.model_validate({**dora, "output_name": "dora37-full"}), [].append, device="cpu")
    out["dora"]["full_losses"] = list(full.losses)
    return out


def _again(home: Path) -> None:
    """This fixture's DoRA and EMA runs of an earlier build deleted, then made again (while
    developing: `python old_home37.py HOME --again` on a copy of a built home)."""
    from fastapi.testclient import TestClient

    from lorastudio.api.app import create_app
    from lorastudio.settings import get_settings

    out = json.loads((home.parent / "old_home.json").read_text())
    with TestClient(create_app(get_settings()), base_url="http://127.0.0.1") as client:
        for run in client.get("/api/runs").json()["runs"]:
            if run["output_name"] in ("dora37", "ema37"):
                client.delete(f"/api/runs/{run['id']}")
    shutil.rmtree(home / "outputs" / "dora37-full", ignore_errors=True)
    out["s37"] = _session37(home, Path(out["model"]))
    (home.parent / "old_home.json").write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__" and sys.argv[2:] == ["--again"]:
    os.environ["LORASTUDIO_HOME"] = sys.argv[1]
    _again(Path(sys.argv[1]))
elif __name__ == "__main__":
    home = Path(sys.argv[1])
    out = build(home)
    out["killed_server"] = _killed_server(home)
    out["s37"] = _session37(home, Path(out["model"]))
    (home.parent / "old_home.json").write_text(json.dumps(out, indent=1, default=str))
    print(json.dumps({k: out[k] for k in ("killed_server", "s37")}, default=str)[:3000])
