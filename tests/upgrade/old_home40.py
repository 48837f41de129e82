"""Build a studio home with the code of session 40's start (run with PYTHONPATH=<old tree>/src):
session 39's fixture home (tests/upgrade/old_home39.py: its edit run on a dataset with control
images stopped at step 2 beside its twin, a plain LoRA run finished ...), then through the old
train(): a DoRA run written in the LyCORIS layout (`lora_format = "kohya"`: a `.dora_scale` per
layer and no `lorastudio.dora_scale` key, RELIABILITY 2090) finished, a gallery image rendered with
it by the old app, a DoRA run started from it (`init_lora`) finished, a run on the disk latent
cache (its shards and crops planned by the old code, RELIABILITY 2191) stopped at step 2 beside
its twin, and a second edit run (its dataset a copy of session 39's, which the test moves: a
paired fingerprint of the old rule holds its controls' absolute paths, RELIABILITY 2040)
stopped at step 2 beside its twin.
`python old_home40.py HOME` (`--s40` adds only this session's part to a home of old_home39.py);
the summary goes to HOME/../old_home.json."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from old_home import _settings  # noqa: E402 (beside this file)
from old_home38 import _stopped_and_full  # noqa: E402

DORA_STEPS = 2


def _render(model: Path, lora: str) -> list[dict]:
    """A gallery image with the run `lora`'s LoRA through the old app: [{status, body, out}]."""
    from fastapi.testclient import TestClient

    from lorastudio.api.app import create_app
    from lorastudio.settings import get_settings

    body = {"family": "flux", "base_model": str(model), "prompt": "a red circle", "seed": 1,
            "steps": 2, "width": 32, "height": 32, "loras": [{"name": lora, "scale": 1.0}]}  # fmt: skip
    with TestClient(create_app(get_settings()), base_url="http://127.0.0.1") as client:
        made = client.post("/api/generate", json=body)
        return [{"status": made.status_code, "body": body, "out": made.json()}]


def _session40(home: Path, model: Path, edit39: dict, done: dict) -> dict:
    """The LyCORIS-layout DoRA run, its render and its init_lora run, and the second edit run (see
    the module); those of `done` (an earlier build's) kept."""
    from lorastudio.config import TrainConfig
    from lorastudio.training.loop import train

    shapes = home / "datasets" / "shapes"
    out = dict(done)
    common = {"steps": DORA_STEPS, "save_every": None, "adapter": "dora"}
    if "dorak" not in out:
        raw = _settings(model, shapes, "dorak40", {**common, "lora_format": "kohya"})
        losses = list(train(TrainConfig.model_validate(raw), [].append, device="cpu").losses)
        out["dorak"] = {"raw": raw, "losses": losses, "gallery": _render(model, "dorak40")}
    if "init" not in out:
        lora = home / "outputs" / "dorak40" / "dorak40.safetensors"
        raw = _settings(model, shapes, "init40", {**common, "init_lora": str(lora)})
        events: list = []
        losses = list(train(TrainConfig.model_validate(raw), events.append, device="cpu").losses)
        warned = [e.message for e in events if e.type == "warning"]
        out["init"] = {"raw": raw, "losses": losses, "warnings": warned}
    if "disk" not in out:  # the disk latent cache's shards and plan, as the old code made them (2191)
        raw = _settings(model, shapes, "disk40", {"steps": 4, "save_every": None, "latent_cache": "disk"})
        out["disk"] = _stopped_and_full(raw)
    if "edit" not in out:
        data = home / "datasets" / "edit40"
        if not data.is_dir():
            shutil.copytree(home / "datasets" / "edit39", data)
        out["edit"] = _stopped_and_full({**edit39["raw"], "output_name": "edit40", "data_dir": str(data)})
    return out


if __name__ == "__main__":
    home = Path(sys.argv[1])
    os.environ["LORASTUDIO_HOME"] = str(home)
    summary = home.parent / "old_home.json"
    if sys.argv[2:] == ["--s40"]:
        out = json.loads(summary.read_text())
    else:
        from old_home34 import _killed_server, build  # noqa: E402
        from old_home37 import _session37  # noqa: E402
        from old_home38 import _session38  # noqa: E402
        from old_home39 import _session39  # noqa: E402

        out = build(home)
        out["killed_server"] = _killed_server(home)
        out["s37"] = _session37(home, Path(out["model"]))
        s38 = _session38(home, Path(out["model"]), {"trig": None, "klein": None})  # as old_home39
        out["s38"] = {k: v for k, v in s38.items() if v is not None}
        out["s39"] = _session39(home, Path(out["model"]), {})
    out["s40"] = _session40(home, Path(out["model"]), out["s39"]["edit"], out.get("s40", {}))
    summary.write_text(json.dumps(out, indent=1, default=str))
    print(json.dumps(out["s40"], default=str)[:3000])
