"""Build a studio home with the code of session 35's start (run with PYTHONPATH=<old tree>/src):
the session 34 fixture's home (tests/upgrade/old_home34.py: CLI runs finished, failed and killed,
server runs finished and stopped, an asynchronous generation, uploaded references, a caption job,
a server killed outright), then a CLI run of that code with LoRA snapshots kept by rotation
(`save_lora_every` 1, `keep_loras` 2) beside the sidecar of a snapshot whose LoRA is gone (a run
killed between the two removals: what the old rotation never swept), and a long metric history
(20,000 steps, one point a step: the old run store's rows, written in one transaction as the old
store writes each). `python old_home35.py HOME`; the summary goes to HOME/../old_home.json."""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from pathlib import Path

from old_home33 import _cli  # noqa: E402 (beside this file)
from old_home34 import _killed_server, build  # noqa: E402

LONG = 20_000  # steps of the long history


def _snapshots(home: Path, model: Path) -> dict:
    """A CLI run of the old code that keeps 2 of its 6 LoRA snapshots, and a lone sidecar left."""
    path = home.parent / "snaps.json"
    raw = {"family": "flux", "base_model": str(model), "data_dir": str(home / "datasets" / "shapes"),
           "resolution": 32, "steps": 6, "learning_rate": 5e-3, "lora_rank": 4, "batch_size": 1,
           "save_every": None, "save_lora_every": 1, "keep_loras": 2, "seed": 0, "output_name": "snaps",
           "max_sequence_length": 16}  # fmt: skip
    path.write_text(json.dumps(raw))
    done = _cli(["train", str(path), "--device", "cpu"])
    loras = home / "outputs" / "snaps" / "loras"
    kept = sorted(p.name for p in loras.iterdir())
    lone = loras / "snaps-step-000002.json"  # the sidecar of a removed snapshot, its LoRA gone
    shutil.copyfile(loras / "snaps-step-000005.json", lone)
    return {"raw": raw, "rc": done["rc"], "err": done["err"], "kept": kept, "lone": lone.name}


def _long_history(home: Path) -> dict:
    """LONG metric points added to the old run "done32"'s record in the old store (its rows)."""
    conn = sqlite3.connect(home / "lorastudio.db")
    with conn:
        run_id = conn.execute("SELECT id FROM runs WHERE output_name='done32'").fetchone()[0]
        conn.executemany(
            "INSERT OR REPLACE INTO metrics (run_id, step, loss, lr) VALUES (?, ?, ?, ?)",
            [(run_id, s, 1.0 / s, 1e-4) for s in range(1, LONG + 1)],
        )
        conn.execute("UPDATE runs SET steps_run=?, total_steps=? WHERE id=?", (LONG, LONG, run_id))
    conn.close()
    return {"run": run_id, "points": LONG}


if __name__ == "__main__":
    home = Path(sys.argv[1])
    out = build(home)
    out["killed_server"] = _killed_server(home)
    out["snaps"] = _snapshots(home, Path(out["model"]))
    out["long"] = _long_history(home)
    (home.parent / "old_home.json").write_text(json.dumps(out, indent=1, default=str))
    print(json.dumps({k: out[k] for k in ("killed_server", "snaps", "long")}, default=str)[:3000])
