"""The wall-time forecast on a loaded host (bench/RESULTS note 48): per point of a
bench.forecast_matrix round, what predicts the run's wall seconds over its CPU seconds (the host's
contention, one thread) and how the forecasts of two trees did against wall and CPU time.

    python -m bench.forecast_contention ROOT OLD_WALL.json NEW_WALL.json [OLD_CPU.json]

ROOT: the matrix's root, its stdout kept as ROOT.log (JSON lines with each point's `host_share`
(the check's share of a core, host_share.py), `share_before` (a meter's just before the child),
`load`, `measured_s`, `cpu_s`). OLD_WALL / NEW_WALL: bench.forecast_replay's JSON of the two trees
(the new one's `forecast_cpu_s`: its forecast on the CPU clock before the share); OLD_CPU: the old
tree's replay with `cpu` (its CPU forecast; else the new tree's CPU forecast stands in).

The predictors of a run's wall / CPU ratio, each against the measured ratio: 1 / the check's share;
1 / the share just before the child; the load factor (1-minute load at the start + 1) / cores (at
least 1); the previous run's own ratio (the newest record's wall over CPU seconds: what a forecast
from wall-clock records carries); the geometric mean of the check's and the previous run's (what
jobs/time_contention.contended uses where the newest record is recent); no correction (1).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any


def _error(forecast: float | None, measured: float | None) -> float | None:
    return None if forecast is None or not measured else 100 * (forecast - measured) / measured


def _summary(name: str, errors: list[float]) -> str:
    if not errors:
        return f"{name}: none"
    within = sum(1 for e in errors if abs(e) <= 15)
    return f"{name}: median |error| {statistics.median(abs(e) for e in errors):.0f} %, within 15 %: {within} of {len(errors)}"


def tables(points: list[dict[str, Any]], old: dict, new: dict, old_cpu: dict, cores: int) -> str:
    """The two markdown tables (the ratio's predictors; the forecasts) and their summaries."""
    ratio_rows = [
        "| point | wall s | CPU s | wall / CPU | load | 1 / share (check) | 1 / share (before) | load factor"
        " | previous run's ratio | geometric mean of the check's and the previous run's |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    names = (
        "1 / share (check)",
        "1 / share (before)",
        "load factor",
        "previous run's ratio",
        "geometric mean (check, previous)",
        "none (1)",
    )
    ratio_errors: dict[str, list[float]] = {n: [] for n in names}
    previous: float | None = None
    for p in points:
        ratio = p["measured_s"] / p["cpu_s"]
        share = p.get("host_share") or p.get("share_before")
        guesses = [
            1 / share if share else None,
            1 / p["share_before"] if p.get("share_before") else None,
            max(1.0, (p["load"][0] + 1) / cores),
            previous,
            (previous / share) ** 0.5 if previous and share else None,
            1.0,
        ]
        cells = []
        for n, g in zip(names, guesses, strict=True):
            e = _error(g, ratio)
            if e is not None:
                ratio_errors[n].append(e)
            cells.append("-" if g is None else f"{g:.2f} ({e:+.0f} %)")
        ratio_rows.append(
            f"| {p['label']} | {p['measured_s']} | {p['cpu_s']} | {ratio:.2f} | {p['load'][0]}-{p['load'][1]} |"
            f" {' | '.join(cells[:5])} |"
        )
        previous = ratio
    ratio_rows += [""] + [_summary(n, ratio_errors[n]) for n in names]

    rows = [
        "| point | wall s | CPU s | basis | old forecast (wall records) | error vs wall | new: CPU forecast / share"
        " | error vs wall | old CPU forecast | error vs CPU | new CPU forecast | error vs CPU |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    errors: dict[str, list[float]] = {k: [] for k in ("old wall", "new wall", "old CPU", "new CPU")}
    for p in points:
        label = p["label"]
        o, n, oc = old.get(label, {}), new.get(label, {}), old_cpu.get(label, {})
        new_cpu = n.get("forecast_cpu_s")
        values = {
            "old wall": (o.get("forecast_s"), p["measured_s"]),
            "new wall": (n.get("forecast_s"), p["measured_s"]),
            "old CPU": (oc.get("forecast_s"), p["cpu_s"]),
            "new CPU": (new_cpu, p["cpu_s"]),
        }
        cells = []
        for key, (f, m) in values.items():
            e = _error(f, m)
            if e is not None:
                errors[key].append(e)
            cells.append(f"{f if f is not None else '-'} | {'-' if e is None else f'{e:+.0f} %'}")
        rows.append(
            f"| {label} | {p['measured_s']} | {p['cpu_s']} | {n.get('source', p.get('time_source'))} | {' | '.join(cells)} |"
        )
    rows += [""] + [_summary(k, v) for k, v in errors.items()]
    return "\n".join(ratio_rows) + "\n\n" + "\n".join(rows)


def main() -> None:
    root = Path(sys.argv[1])
    log = Path(f"{root}.log").read_text(encoding="utf-8").splitlines()
    points = [json.loads(line) for line in log if line.startswith("{")]
    replays = [
        {p["label"]: p for p in json.loads(Path(path).read_text(encoding="utf-8"))} for path in sys.argv[2:5]
    ]
    old, new = replays[0], replays[1]
    old_cpu = replays[2] if len(replays) > 2 else {}
    print(tables(points, old, new, old_cpu, len(os.sched_getaffinity(0))))


if __name__ == "__main__":
    main()
