"""Build a studio home with an OLDER lorastudio (run with PYTHONPATH=<old checkout>/src): the
session 26 upgrade audit's fixture. `python old_home.py HOME` writes, under HOME, what a user of
the old code would have: tiny models, datasets (plain, .caption files, regularisation, a kohya
import), finished and stopped runs with checkpoints (plain, EMA, DoRA, Prodigy, a validation
split with regularisation, the disk latent cache), gallery images with LoRAs and a finished
caption job. Only APIs present in the old code are used (train(), the CLI, the app's routes).

The summary (what was built) is written to HOME/../old_home.json for the checks."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["LORASTUDIO_STANDBY_WORKER"] = "0"

RUNS = {
    # name: (extra settings, stop step or None for a finished run)
    "plain": ({}, 2),
    "ema": ({"ema_decay": 0.9}, 2),
    "dora": ({"adapter": "dora"}, 2),
    "prodigy": ({"optimizer": "prodigy", "learning_rate": 0.01}, 2),
    "valreg": ({"validation_split": 0.25, "datasets": "REG"}, 2),
    "disk": ({"latent_cache": "disk"}, 2),
    "rev": ({"revision": "main"}, 2),  # a revision beside a local folder (never used)
    "capfiles": ({"data_dir": "CAPFILES", "latent_cache": "disk", "default_caption": "a shape"}, 2),
    "kohya": ({"data_dir": "KOHYA", "kohya_folders": True}, 2),  # in place, .caption files beside
    "hub": ({"base_model": "acme/flux", "latent_cache": "disk"}, 2),  # a hub-cache base (tokenizer keys)
    "done": ({}, None),
}
HUB_COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _stop_at(step: int):
    from lorastudio.training.events import StopRequest

    events: list = []

    def check():
        done = [e for e in events if e.type == "progress"]
        return StopRequest(save=True) if done and done[-1].step >= step else None

    return events, check


def _settings(model: Path, data: Path, name: str, extra: dict) -> dict:
    raw = {
        "family": "flux", "base_model": str(model), "data_dir": str(data), "resolution": 32,
        "steps": 4, "learning_rate": 5e-3, "lora_rank": 4, "batch_size": 1, "save_every": 1,
        "seed": 0, "output_name": name, "max_sequence_length": 16,
    }  # fmt: skip
    raw.update(extra)
    return raw


def build(home: Path) -> dict:
    os.environ["LORASTUDIO_HOME"] = str(home)
    os.environ["HF_HUB_CACHE"] = str(home.parent / "hf-cache")  # before huggingface_hub is imported
    from lorastudio.config import TrainConfig
    from lorastudio.settings import get_settings
    from lorastudio.tiny import make_sample_dataset, save_tiny_model
    from lorastudio.tiny.vlm import save_tiny_vlm
    from lorastudio.training.loop import train

    get_settings.cache_clear()
    settings = get_settings()
    settings.ensure_dirs()
    model = save_tiny_model("flux", settings.models_dir / "tiny-flux")
    snapshot = home.parent / "hf-cache" / "models--acme--flux" / "snapshots" / HUB_COMMIT
    shutil.copytree(model, snapshot)  # the tiny FLUX.1 as the hub cache keeps "acme/flux"
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text(HUB_COMMIT)
    vlm = save_tiny_vlm(settings.models_dir / "tiny-vlm")
    shapes = make_sample_dataset(settings.datasets_dir / "shapes")
    reg = make_sample_dataset(settings.datasets_dir / "reg", seed=1)
    make_sample_dataset(settings.datasets_dir / "cards", seed=2)  # the caption job's
    capfiles = settings.datasets_dir / "capfiles"
    shutil.copytree(shapes, capfiles)
    for txt in capfiles.glob("*.txt"):
        txt.rename(txt.with_suffix(".caption"))
    kohya_in_place = home.parent / "kohya-in-place"  # a kohya folder of images with .caption files
    (kohya_in_place / "2_sks shape").mkdir(parents=True)
    for img in sorted(capfiles.glob("*"))[:8]:
        shutil.copy(img, kohya_in_place / "2_sks shape" / img.name)
    summary: dict = {"runs": {}}
    for name, (extra, stop) in RUNS.items():
        data = {"CAPFILES": capfiles, "KOHYA": kohya_in_place}.get(str(extra.get("data_dir")), shapes)
        raw = _settings(model, data, name, {k: v for k, v in extra.items() if k != "data_dir"})
        if raw.get("datasets") == "REG":  # the subject beside class images (regularisation)
            del raw["data_dir"]
            raw["datasets"] = [{"path": str(shapes)}, {"path": str(reg), "regularisation": True}]
        try:
            config = TrainConfig.model_validate(raw)
        except Exception as exc:  # noqa: BLE001 - the old code refused it: recorded, not fatal
            summary["runs"][name] = {"refused": str(exc)[:400]}
            continue
        events, check = _stop_at(stop) if stop else ([], None)
        try:
            result = train(config, events.append, check, device="cpu")
        except Exception as exc:  # noqa: BLE001 - refused by the old code (its preflight): recorded
            summary["runs"][name] = {"refused": str(exc)[:400]}
            continue
        summary["runs"][name] = {"raw": raw, "stopped": bool(result.stopped), "losses": list(result.losses)}
        if stop:  # the same run uninterrupted: what an exact resume must reproduce
            full = train(config.model_copy(update={"output_name": f"{name}-full"}), [].append, device="cpu")
            summary["runs"][name]["full_losses"] = list(full.losses)
    cli_config = home.parent / "cli-run.json"  # a run of the CLI: recorded in the run store
    cli_config.write_text(json.dumps(_settings(model, shapes, "clirun", {"steps": 2, "save_every": None})))
    summary["cli_run"] = _cli(["train", str(cli_config), "--device", "cpu"])
    summary["cache"] = _cli(["cache", "ls"])
    # a kohya import and a caption job, a gallery image with a LoRA: through the old app
    kohya = home.parent / "kohya-src"
    (kohya / "3_sks shape").mkdir(parents=True)
    for img in sorted(shapes.glob("*.png"))[:3]:
        shutil.copy(img, kohya / "3_sks shape" / img.name)
    summary["kohya"] = _cli(["datasets", "import", str(kohya), "--kohya", "--name", "ko"])
    summary["gallery"], summary["caption_job"] = _app_work(settings, model, vlm)
    return summary


def _cli(args: list[str]) -> dict:
    import subprocess

    done = subprocess.run([sys.executable, "-m", "lorastudio.cli", *args], capture_output=True, text=True)
    return {"args": args, "rc": done.returncode, "out": done.stdout[-4000:], "err": done.stderr[-2000:]}


def _app_work(
    settings, model: Path, vlm: Path, lora: str = "done", listed: bool = False
) -> tuple[list, dict]:
    """Gallery images (with the run `lora`'s LoRA, another at half strength, none) and a finished
    caption job through the app's routes; `listed`: the caption jobs' listing kept too (old_home30)."""
    from fastapi.testclient import TestClient

    from lorastudio.api.app import create_app

    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        images = []
        for loras in ([{"name": lora, "scale": 1.0}], [{"name": "plain", "scale": 0.5}], []):
            body = {"family": "flux", "base_model": str(model), "prompt": "a red circle", "seed": 1,
                    "steps": 2, "width": 32, "height": 32, "loras": loras}  # fmt: skip
            made = client.post("/api/generate", json=body)
            images.append({"status": made.status_code, "body": body, "out": made.json()})
        job = client.post(
            "/api/datasets/cards/caption", json={"model": str(vlm), "max_tokens": 4, "overwrite": True}
        )
        caption = {"start": job.status_code, "out": job.json()}
        if job.status_code == 202:
            for _ in range(600):
                now = client.get(f"/api/captions/{job.json()['id']}").json()
                if now["status"] not in ("queued", "running"):
                    break
                time.sleep(0.5)
            caption["end"] = now
        if listed:
            caption["list"] = client.get("/api/captions").json() if job.status_code == 202 else None
        return images, caption


if __name__ == "__main__":
    home = Path(sys.argv[1])
    out = build(home)
    (home.parent / "old_home.json").write_text(json.dumps(out, indent=1, default=str))
    print(
        json.dumps(
            {k: (v if k != "runs" else {n: list(r) for n, r in v.items()}) for k, v in out.items()},
            default=str,
        )[:3000]
    )
