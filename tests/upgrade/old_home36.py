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
from pathlib import Path

from old_home import _settings, _stop_at  # noqa: E402 (beside this file)
from old_home34 import _killed_server, build  # noqa: E402
from old_home35 import _long_history, _snapshots  # noqa: E402

LONG = 3000  # steps before the stop (0.06 s a step at 32 px on one core: ~3 min)


def _long_run(home: Path, model: Path) -> dict:
    """A run of the old code stopped (with a checkpoint) at step LONG of LONG + 4, a preview
    round every 1,000 steps; its config and the old checkpoint's losses."""
    import torch

    from lorastudio.config import TrainConfig
    from lorastudio.training.loop import train

    raw = _settings(model, home / "datasets" / "shapes", "long", {"steps": LONG + 4, "save_every": None})
    raw.update(sample_every=1000, sample_prompts=["a red square"], sample_steps=1)
    events, check = _stop_at(LONG)
    done = train(TrainConfig.model_validate(raw), events.append, check, device="cpu")
    state = torch.load(
        home / "outputs" / "long" / "checkpoints" / f"step-{LONG:06d}" / "state.pt", weights_only=True
    )
    return {"raw": raw, "steps": done.steps_run, "losses": [float(x) for x in state["losses"]]}


if __name__ == "__main__":
    home = Path(sys.argv[1])
    out = build(home)
    out["killed_server"] = _killed_server(home)
    out["snaps"] = _snapshots(home, Path(out["model"]))
    out["long_history"] = _long_history(home)
    out["long"] = _long_run(home, Path(out["model"]))
    (home.parent / "old_home.json").write_text(json.dumps(out, indent=1, default=str))
    print(json.dumps({k: out[k] for k in ("killed_server", "snaps")}, default=str)[:3000])
