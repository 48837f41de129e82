"""Build a studio home with the code of session 38's start (run with PYTHONPATH=<old tree>/src):
session 37's fixture home (tests/upgrade/old_home37.py: CLI runs finished, failed and killed,
server runs finished, stopped and resumed, an async generation, a caption job, a DoRA and an EMA
run), then through the old train(): a LoKr run stopped with a checkpoint at step 2 beside the same
run uninterrupted (the old code drew the global CPU generator once per LoKr layer and step:
RELIABILITY 1800), a run with a validation split stopped likewise beside its uninterrupted twin
(its checkpoint has no `validation_noise_rule`: 1681), and a dataset whose captions hold
`{trigger}` and `|||` (refused by this session's scan: 1733) with a run of it stopped at step 2,
and a step-distilled FLUX.2 klein run whose sample prompt sets guidance 4 (refused for a fresh run
by this session: 1682) stopped likewise beside its twin.
`python old_home38.py HOME` (`--s38` adds only this session's part to a home of old_home37.py);
the summary goes to HOME/../old_home.json."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from old_home import _settings  # noqa: E402 (beside this file)

STEPS = 6


def _stopped_and_full(raw: dict) -> dict:
    """`raw` trained by the old train() stopped (with save) at step 2 and, under another name,
    uninterrupted: {raw, stopped_losses, full_losses, full_validation}."""
    from lorastudio.config import TrainConfig
    from lorastudio.training.events import StopRequest
    from lorastudio.training.loop import train

    events: list = []

    def check() -> StopRequest | None:
        done = [e for e in events if e.type == "progress"]
        return StopRequest(save=True) if done and done[-1].step >= 2 else None

    stopped = train(TrainConfig.model_validate(raw), events.append, check, device="cpu")
    name = raw["output_name"] + "-full"
    full = train(TrainConfig.model_validate({**raw, "output_name": name}), [].append, device="cpu")
    record = Path(os.environ["LORASTUDIO_HOME"]) / "outputs" / name / "validation.json"
    return {
        "raw": raw,
        "stopped_losses": list(stopped.losses),
        "stopped": stopped.stopped,
        "full_losses": list(full.losses),
        "full_validation": json.loads(record.read_text()) if record.is_file() else None,
    }


def _klein(home: Path) -> Path:
    """A tiny FLUX.2 klein marked step-distilled (its pipeline runs no CFG), under models/."""
    from lorastudio.tiny import save_tiny_model, tiny_model_dir

    distilled = home / "models" / "klein38-distilled"
    if not distilled.is_dir():
        shutil.copytree(
            save_tiny_model("flux2-klein", tiny_model_dir("flux2-klein", home.parent / "bases")), distilled
        )
        index = json.loads((distilled / "model_index.json").read_text())
        (distilled / "model_index.json").write_text(json.dumps({**index, "is_distilled": True}))
    return distilled


def _session38(home: Path, model: Path, done: dict) -> dict:
    """The LoKr, validation, placeholder-caption and klein runs (see the module); those of `done`
    (an earlier build's) kept."""
    shapes = home / "datasets" / "shapes"
    trig = home / "datasets" / "trig38"
    if not trig.is_dir():
        shutil.copytree(shapes, trig)
        for i, txt in enumerate(sorted(trig.glob("*.txt"))):
            txt.write_text(("{trigger} " if i % 2 else "sks, woman ||| ") + txt.read_text())
    common = {"steps": STEPS, "save_every": None}
    runs = {
        "lokr": lambda: _settings(model, shapes, "lokr38", {**common, "adapter": "lokr"}),
        "val": lambda: _settings(model, shapes, "val38", {**common, "validation_split": 0.25, "validate_every": 2}),
        "trig": lambda: _settings(model, trig, "trig38", {**common, "trigger_word": "sks"}),
        "klein": lambda: _settings(_klein(home), shapes, "klein38", {  # a preview guidance it never applied
            **common, "family": "flux2-klein", "sample_every": 1, "sample_steps": 1,
            "sample_prompts": [{"prompt": "a dog", "guidance": 4}],
        }),
    }  # fmt: skip
    return {k: done[k] if k in done else _stopped_and_full(raw()) for k, raw in runs.items()}


if __name__ == "__main__":
    home = Path(sys.argv[1])
    os.environ["LORASTUDIO_HOME"] = str(home)
    summary = home.parent / "old_home.json"
    if sys.argv[2:] == ["--s38"]:
        out = json.loads(summary.read_text())
    else:
        from old_home34 import _killed_server, build  # noqa: E402
        from old_home37 import _session37  # noqa: E402

        out = build(home)
        out["killed_server"] = _killed_server(home)
        out["s37"] = _session37(home, Path(out["model"]))
    out["s38"] = _session38(home, Path(out["model"]), out.get("s38", {}))
    summary.write_text(json.dumps(out, indent=1, default=str))
    print(json.dumps(out["s38"], default=str)[:3000])
