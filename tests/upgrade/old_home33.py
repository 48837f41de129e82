"""Build a studio home with the code of session 33's start (run with PYTHONPATH=<old tree>/src):
the session 33 upgrade audit's fixture. `python old_home33.py HOME` writes, under HOME, what a user
of that code would have: the tiny FLUX.1 added (`models add`), datasets, a stopped run beside the
same run uninterrupted, CLI runs finished, failed and killed (the run store's records, with no
`elapsed_s`), server runs finished and stopped (the job service's records), gallery images, an
asynchronous generation (`POST /api/generations`), uploaded references and a finished caption
job. Only APIs present in the old code are used (train(), the CLI, the app's routes).

The summary (what was built) is written to HOME/../old_home.json for the checks."""

from __future__ import annotations

import io
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["LORASTUDIO_STANDBY_WORKER"] = "0"

from old_home import _app_work, _settings, _stop_at  # noqa: E402 (the session 26 fixture's, beside this file)
from old_home30 import _killed  # noqa: E402

ENDED = ("completed", "failed", "stopped", "cancelled", "interrupted")


def build(home: Path) -> dict:
    os.environ["LORASTUDIO_HOME"] = str(home)
    os.environ["HF_HUB_CACHE"] = str(home.parent / "hf-cache")
    from lorastudio.config import TrainConfig
    from lorastudio.settings import get_settings
    from lorastudio.tiny import make_sample_dataset, save_tiny_model
    from lorastudio.tiny.vlm import save_tiny_vlm
    from lorastudio.training.loop import train

    get_settings.cache_clear()
    settings = get_settings()
    settings.ensure_dirs()
    model = save_tiny_model("flux", home.parent / "bases" / "tiny-flux")
    vlm = save_tiny_vlm(settings.models_dir / "tiny-vlm")
    shapes = make_sample_dataset(settings.datasets_dir / "shapes")
    make_sample_dataset(settings.datasets_dir / "cards", seed=2)  # the caption job's
    summary: dict = {"runs": {}, "model": str(model)}
    summary["added"] = _cli(["models", "add", str(model)])
    raw = _settings(model, shapes, "plain", {})
    config = TrainConfig.model_validate(raw)
    events, check = _stop_at(2)
    train(config, events.append, check, device="cpu")
    full = train(config.model_copy(update={"output_name": "plain-full"}), [].append, device="cpu")
    summary["runs"]["plain"] = {"raw": raw, "full_losses": list(full.losses)}
    path = home.parent / "done32.json"
    path.write_text(json.dumps(_settings(model, shapes, "done32", {"save_every": None})))
    summary["runs"]["done32"] = _cli(["train", str(path), "--device", "cpu"])
    path = home.parent / "failed.json"  # a CLI run that fails at its first optimizer step
    path.write_text(json.dumps(_settings(model, shapes, "failed", {"save_every": None})))
    summary["runs"]["failed"] = _cli(["-c", FAIL, "train", str(path), "--device", "cpu"], module=False)
    summary["killed"] = _killed(home, model, shapes)
    summary["gallery"], summary["caption_job"] = _app_work(settings, model, vlm, lora="done32", listed=True)
    summary["server"] = _server_work(settings, model, shapes)
    summary["cache"] = _cli(["cache", "ls"])
    return summary


FAIL = (
    "import sys, torch; from lorastudio.cli.app import main\n"
    "def step(*a, **k): raise RuntimeError('injected failure')\n"
    "torch.optim.AdamW.step = step; sys.argv = ['lorastudio', *sys.argv[1:]]; main()"
)


def _cli(args: list[str], module: bool = True) -> dict:
    """The old CLI (`module`: `python -m lorastudio.cli args`, else `python args`)."""
    import subprocess

    head = ["-m", "lorastudio.cli"] if module else []
    done = subprocess.run([sys.executable, *head, *args], capture_output=True, text=True)
    return {"args": args, "rc": done.returncode, "out": done.stdout[-4000:], "err": done.stderr[-2000:]}


def _server_work(settings, model: Path, shapes: Path) -> dict:
    """Server runs (one finished, one stopped with a checkpoint), an asynchronous generation
    followed to its image and two uploaded references, through the old app."""
    from fastapi.testclient import TestClient
    from PIL import Image

    from lorastudio.api.app import create_app

    out: dict = {}
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:

        def wait(job_id: str, stop_at: int | None = None) -> dict:
            for _ in range(1200):
                now = client.get("/api/train/status").json()
                job = now.get("job") or {}
                step = (job.get("progress") or {}).get("step") or 0
                if stop_at is not None and job.get("status") == "running" and step >= stop_at:
                    client.post("/api/train/stop", json={"save": True, "job_id": job_id})
                    stop_at = None
                if job.get("id") == job_id and job.get("status") in ENDED:
                    return job
                time.sleep(0.25)
            return {"timeout": True}

        for name, extra, stop in (
            ("srv-done", {"save_every": None}, None),
            ("srv-stopped", {"steps": 400}, 2),
        ):
            started = client.post("/api/train/start", json={"config": _settings(model, shapes, name, extra)})
            out[name] = {"start": started.status_code, "out": started.json()}
            if started.status_code == 201:
                out[name]["end"] = wait(started.json()["id"], stop)
        body = {"family": "flux", "base_model": str(model), "prompt": "a blue square", "seed": 2,
                "steps": 2, "width": 32, "height": 32, "loras": [], "request_id": "gen-old-async"}  # fmt: skip
        sent = client.post("/api/generations", json=body)
        out["async"] = {"start": sent.status_code, "body": body}
        for _ in range(600):
            now = client.get("/api/generations/gen-old-async").json()
            if now.get("state") in ("done", "failed", "cancelled", "interrupted"):
                break
            time.sleep(0.25)
        out["async"]["end"] = now
        files = []
        for color in ("red", "green"):
            buf = io.BytesIO()
            Image.new("RGB", (32, 32), color).save(buf, format="PNG")
            files.append(("files", (f"{color}.png", buf.getvalue(), "image/png")))
        refs = client.post("/api/generate/references", files=files)
        out["references"] = {"status": refs.status_code, "out": refs.json()}
        out["runs"] = client.get("/api/runs").json()
    return out


if __name__ == "__main__":
    home = Path(sys.argv[1])
    out = build(home)
    (home.parent / "old_home.json").write_text(json.dumps(out, indent=1, default=str))
    print(json.dumps({k: (v if k != "runs" else list(v)) for k, v in out.items()}, default=str)[:3000])
