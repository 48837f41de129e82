"""POST -> first event and POST -> first step through the API, with and without the standby
training worker (LORASTUDIO_STANDBY_WORKER, jobs/standby.py), on the tiny FLUX.1.

    python -m bench.standby_start /tmp/standby-bench --runs 3

Each run starts a fresh `lorastudio serve` (bench/e2e_api.py), waits `--settle` seconds (the same
for both modes: a standby has done its imports by then, as on a server that has been up a while),
records the server's child processes' RSS (the standby's cost), POSTs a 4-step run and times its
events. Prints one JSON line per run and the medians per mode.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bench.e2e_api import api_run


def _children_rss_mib(pid: int) -> dict[int, float]:
    """RSS (MiB) of `pid`'s children, multiprocessing's resource tracker aside."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) != pid:
                continue
            if b"resource_tracker" in (entry / "cmdline").read_bytes():
                continue
            status = (entry / "status").read_text()
        except OSError:
            continue
        kib = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
        found[int(entry.name)] = kib / 1024
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--settle", type=float, default=30.0)
    opts = parser.parse_args()
    from lorastudio.tiny import make_sample_dataset, save_tiny_model, tiny_model_dir

    opts.root.mkdir(parents=True, exist_ok=True)
    model = save_tiny_model("flux", tiny_model_dir("flux", opts.root / "models"))
    results: dict[str, list[dict]] = {"0": [], "1": []}
    for i in range(opts.runs):
        for mode in ("1", "0"):
            home = opts.root / f"home-{mode}-{i}"
            make_sample_dataset(home / "datasets" / "shapes")
            rss: dict[int, float] = {}

            def settle(pid: int, rss: dict[int, float] = rss) -> None:
                time.sleep(opts.settle)
                rss.update(_children_rss_mib(pid))

            config = {"family": "flux", "base_model": str(model), "data_dir": "shapes",
                      "resolution": 32, "steps": 4, "output_name": f"r{i}"}  # fmt: skip
            timed, end, _ = api_run(
                home, config, opts.root / f"serve-{mode}-{i}.log", env={"LORASTUDIO_STANDBY_WORKER": mode},
                before_post=settle,
            )  # fmt: skip
            first_event = timed[0][0]
            first_step = next(t for t, e in timed if e.type == "progress")
            row = {"standby": mode, "run": i, "first_event_s": round(first_event, 2),
                   "first_step_s": round(first_step, 2), "end_s": round(end, 2),
                   "children_rss_mib": [round(v) for v in rss.values()]}  # fmt: skip
            print(json.dumps(row), flush=True)
            results[mode].append(row)
    for mode, rows in results.items():
        med = {k: statistics.median(r[k] for r in rows) for k in ("first_event_s", "first_step_s", "end_s")}
        print(json.dumps({"standby": mode, "runs": len(rows), "median": med}), flush=True)


if __name__ == "__main__":
    main()
