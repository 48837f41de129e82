"""Build a studio home with the code of session 30's start (run with PYTHONPATH=<old checkout>/src):
the session 30 upgrade audit's fixture. `python old_home30.py HOME` writes, under HOME, what a user
of that code would have: the tiny FLUX.1 added to the catalogue (`models add`), datasets, stopped
runs (plain with samples, EMA, a multi-dataset run, the disk latent cache) each beside the same run
uninterrupted, a CLI run killed mid-run (interrupted, its checkpoints on disk), finished runs at two
sizes (their time records), gallery images with LoRAs and a finished caption job. Only APIs present
in the old code are used (train(), the CLI, the app's routes).

The summary (what was built) is written to HOME/../old_home.json for the checks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["LORASTUDIO_STANDBY_WORKER"] = "0"

from old_home import _app_work, _cli, _settings, _stop_at  # noqa: E402 (the session 26 fixture's, beside this file)

RUNS = {
    # name: (extra settings, stop step or None for a finished run)
    "plain": ({"sample_prompts": ["a red circle"], "sample_every": 1, "sample_steps": 2}, 2),
    "ema": ({"ema_decay": 0.9}, 2),
    "multi": ({"datasets": "MULTI"}, 2),
    "disk": ({"latent_cache": "disk"}, 2),
}
KILLED_TWIN_STEPS = 40  # the killed run's uninterrupted twin is stopped there (the kill comes far before)
CLI_RUNS = {"done32": {}, "done64": {"resolution": 64}}  # finished through the CLI: in the run store


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
    model = save_tiny_model("flux", home.parent / "bases" / "tiny-flux")  # outside models/: added
    vlm = save_tiny_vlm(settings.models_dir / "tiny-vlm")
    shapes = make_sample_dataset(settings.datasets_dir / "shapes")
    make_sample_dataset(settings.datasets_dir / "reg", seed=1)
    make_sample_dataset(settings.datasets_dir / "cards", seed=2)  # the caption job's
    summary: dict = {"runs": {}, "model": str(model)}
    summary["added"] = _cli(["models", "add", str(model)])
    for name, (extra, stop) in RUNS.items():
        raw = _settings(model, shapes, name, extra)
        if raw.get("datasets") == "MULTI":
            del raw["data_dir"]
            raw["datasets"] = [{"path": str(shapes), "repeats": 2}, {"path": "reg", "trigger_word": "sks"}]
        config = TrainConfig.model_validate(raw)
        events, check = _stop_at(stop) if stop else ([], None)
        result = train(config, events.append, check, device="cpu")
        summary["runs"][name] = {"raw": raw, "stopped": bool(result.stopped), "losses": list(result.losses)}
        if stop:  # the same run uninterrupted: what an exact resume must reproduce
            full = train(config.model_copy(update={"output_name": f"{name}-full"}), [].append, device="cpu")
            summary["runs"][name]["full_losses"] = list(full.losses)
    for name, extra in CLI_RUNS.items():  # their time records at two sizes, their run records
        config = home.parent / f"{name}.json"
        config.write_text(json.dumps(_settings(model, shapes, name, {"save_every": None, **extra})))
        summary["runs"][name] = _cli(["train", str(config), "--device", "cpu"])
    summary["killed"] = _killed(home, model, shapes)
    events, check = _stop_at(KILLED_TWIN_STEPS)  # the killed run's twin, uninterrupted to that step
    twin = TrainConfig.model_validate({**summary["killed"]["raw"], "output_name": "killed-full"})
    summary["killed"]["full_losses"] = list(train(twin, events.append, check, device="cpu").losses)
    summary["gallery"], summary["caption_job"] = _app_work(settings, model, vlm, lora="done32", listed=True)
    summary["cache"] = _cli(["cache", "ls"])
    summary["modes"] = {  # what the old code left (the umask of the build: 002, a team's)
        str(p.relative_to(home)): oct(p.stat().st_mode & 0o777)
        for p in (
            home / "lorastudio.lock",
            home / ".added_models.lock",
            home / "lorastudio.db",
            *sorted((home / "cache" / "encoded").glob("*/*")),
            *sorted(home.glob("outputs/*/checkpoints/*/lora.safetensors")),
        )
    }
    return summary


def _killed(home: Path, model: Path, shapes: Path) -> dict:
    """A CLI run killed (SIGKILL) after its second checkpoint: the run store keeps it live by a
    dead process (interrupted), its checkpoints on disk."""
    raw = _settings(model, shapes, "killed", {"steps": 100_000})
    config = home.parent / "killed.json"
    config.write_text(json.dumps(raw))
    proc = subprocess.Popen(
        [sys.executable, "-m", "lorastudio.cli", "train", str(config), "--device", "cpu"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    checkpoints = home / "outputs" / "killed" / "checkpoints"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if len(list(checkpoints.glob("step-*"))) >= 2:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return {"raw": raw, "checkpoints": sorted(p.name for p in checkpoints.glob("step-*"))}


if __name__ == "__main__":
    home = Path(sys.argv[1])
    out = build(home)
    (home.parent / "old_home.json").write_text(json.dumps(out, indent=1, default=str))
    print(json.dumps({k: (v if k != "runs" else list(v)) for k, v in out.items()}, default=str)[:3000])
