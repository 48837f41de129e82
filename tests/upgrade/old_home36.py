"""Build a studio home with the code of session 36's start (run with PYTHONPATH=<old tree>/src):
session 35's fixture home (tests/upgrade/old_home35.py: CLI runs finished, failed and killed,
server runs finished and stopped, an asynchronous generation, a caption job, a server killed
outright, LoRA snapshots kept by rotation, a 20,000-step metric history), then a run of LONG
steps stopped with a checkpoint that holds every loss in its state.pt (the old format: RELIABILITY
1340 moved them to losses.bin), with preview rounds. `python old_home36.py HOME`; the summary goes
to HOME/../old_home.json."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from old_home import _settings  # noqa: E402 (beside this file)
from old_home34 import _killed_server, build  # noqa: E402
from old_home35 import _long_history, _snapshots  # noqa: E402

LONG = 3000  # steps before the stop (0.06 s a step at 32 px on one core: ~3 min)


def _long_run(home: Path, model: Path) -> dict:
    """A run of the old server stopped (with a checkpoint) once past step LONG of LONG + 400, a
    preview round every 1,000 steps; its config and the old checkpoint's losses."""
    import torch
    from fastapi.testclient import TestClient

    from lorastudio.api.app import create_app
    from lorastudio.settings import get_settings

    raw = _settings(model, home / "datasets" / "shapes", "long", {"steps": LONG + 400, "save_every": None})
    raw.update(sample_every=1000, sample_prompts=["a red square"], sample_steps=1)
    with TestClient(create_app(get_settings()), base_url="http://127.0.0.1") as client:
        started = client.post("/api/train/start", json={"config": raw})
        if started.status_code != 201:
            return {"raw": raw, "start": started.text}
        job_id, stop, deadline = started.json()["id"], LONG, time.monotonic() + 1500
        while time.monotonic() < deadline:
            job = client.get("/api/train/status").json().get("job") or {}
            step = (job.get("progress") or {}).get("step") or 0
            if stop is not None and job.get("status") == "running" and step >= stop:
                client.post("/api/train/stop", json={"save": True, "job_id": job_id})
                stop = None
            if job.get("id") == job_id and job.get("status") in (
                "completed",
                "failed",
                "stopped",
                "interrupted",
            ):
                break
            time.sleep(0.25)
    found = sorted((home / "outputs" / "long" / "checkpoints").glob("step-*"))
    state = torch.load(found[-1] / "state.pt", weights_only=True)
    return {"raw": raw, "status": job.get("status"), "step": int(state["step"]),
            "losses": [float(x) for x in state["losses"]]}  # fmt: skip


if __name__ == "__main__":
    home = Path(sys.argv[1])
    out = build(home)
    out["killed_server"] = _killed_server(home)
    out["snaps"] = _snapshots(home, Path(out["model"]))
    out["long_history"] = _long_history(home)
    out["long"] = _long_run(home, Path(out["model"]))
    (home.parent / "old_home.json").write_text(json.dumps(out, indent=1, default=str))
    print(json.dumps({k: out[k] for k in ("killed_server", "snaps")}, default=str)[:3000])
