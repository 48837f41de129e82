"""The wall-time forecast's table of a bench.forecast_matrix round against wall and CPU time
(bench/RESULTS note 46): per point its measured wall and CPU seconds (the child's ru_utime +
ru_stime), the load average at its start and end, and the forecast of two trees replayed on the
round's records (bench.forecast_replay), of wall time (the records' wall-clock phases) and of CPU
time (their CPU-clock phases, `cpu`), each with its error, and the new CPU forecast x the load
factor (1-minute load at the start + 1) / cores against wall time; then the median |error| and
the points within 15 % of each column. Run it on the host that ran the round (its cores).

    python -m bench.forecast_table ROOT OLD_WALL.json NEW_WALL.json OLD_CPU.json NEW_CPU.json

ROOT: the matrix's root, whose stdout was kept as ROOT.log (its JSON lines). The replays' JSON as
`python -m bench.forecast_replay ROOT ROOT.log OUT.json [cpu]` wrote them, with each tree on
PYTHONPATH ("old": the code before a change, "new": after).
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


def table(points: list[dict[str, Any]], replays: list[dict[str, dict[str, Any]]], cores: int) -> str:
    """The markdown table and its summary lines (`replays`: old wall, new wall, old CPU, new CPU,
    each label -> its replayed point; `cores`: the host's, for the load factor's column)."""
    rows = [
        "| point | wall s | CPU s | load | forecast of wall (old / new) | error old / new"
        " | forecast of CPU s (old / new) | error old / new | new CPU forecast x load factor vs wall | basis |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    errors: list[list[float]] = [[], [], [], [], []]
    for p in points:
        label = p["label"]
        forecasts = [r.get(label, {}).get("forecast_s") for r in replays]
        measured = [p["measured_s"], p["measured_s"], p["cpu_s"], p["cpu_s"]]
        errs = [_error(f, m) for f, m in zip(forecasts, measured, strict=True)]
        # the obvious load correction: the CPU forecast x (1-minute load at the start + 1) / cores
        factor = max(1.0, (p["load"][0] + 1) / cores)
        errs.append(_error(forecasts[3] * factor if forecasts[3] else None, p["measured_s"]))
        for column, e in zip(errors, errs, strict=True):
            if e is not None:
                column.append(abs(e))
        text = ["-" if e is None else f"{e:+.0f} %" for e in errs]
        rows.append(
            f"| {label} | {p['measured_s']} | {p['cpu_s']} | {p['load'][0]}-{p['load'][1]} |"
            f" {forecasts[0]} / {forecasts[1]} | {text[0]} / {text[1]} | {forecasts[2]} / {forecasts[3]} |"
            f" {text[2]} / {text[3]} | {text[4]} | {replays[3].get(label, {}).get('source', p['time_source'])} |"
        )
    names = ("wall, old", "wall, new", "CPU, old", "CPU, new", "load factor, new")
    for name, column in zip(names, errors, strict=True):
        if column:
            within = sum(1 for e in column if e <= 15)
            rows.append(
                f"\n{name}: median |error| {statistics.median(column):.0f} %, within 15 %: {within} of {len(column)}"
            )
    return "\n".join(rows)


def main() -> None:
    root = Path(sys.argv[1])
    log = Path(f"{root}.log").read_text(encoding="utf-8").splitlines()
    points = [json.loads(line) for line in log if line.startswith("{")]
    replays = [
        {p["label"]: p for p in json.loads(Path(path).read_text(encoding="utf-8"))} for path in sys.argv[2:6]
    ]
    print(table(points, replays, len(os.sched_getaffinity(0))))


if __name__ == "__main__":
    main()
