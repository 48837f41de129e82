"""Replay the wall-time forecast of each point of a bench.forecast_matrix root from the records
written before it (bench/RESULTS note 42): a temporary home holding those records, then the same
`check_run` + `preflight_report` as `lorastudio train --check`, with whichever tree is on
PYTHONPATH (so one round's records give the forecast of two trees). Records of an older engine
that lack `sample_images` get 1 (the matrix's sample points have one prompt).

    PYTHONPATH=<tree>/src python -m bench.forecast_replay ROOT MATRIX_LOG OUT.json [cpu]

OUT.json: per point, its label, the forecast (total, source, per phase), the matrix's measured
wall time (from MATRIX_LOG, the matrix's stdout), its record's total and measured phases.
`cpu` (session 34, RESULTS note 46): the records' phases on the CPU clock (their `cpu` part:
timings.PhaseClock.cpu_stamped, the process's CPU seconds) stand in for their wall-clock ones, so
the forecast is one of CPU seconds, against the matrix's measured CPU seconds (`measured_cpu_s`):
with one thread that is the run's work whatever else the shared host ran (records without the
part are left out). A tree with the contention rule (session 35, RESULTS note 48) is given the
share of a core the matrix's check measured for each point, and its CPU forecast (`cpu_s`) is kept.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path


def _fixed_share(share: float | None) -> None:
    """The preflight's share of a core (host_share.py, session 35) fixed at the one the matrix's
    check measured for this point (its `host_share`, else `share_before`), not this replay's; a
    tree without the meter: nothing to fix."""
    from lorastudio.jobs import preflight

    if share is None or not hasattr(preflight, "HostShare"):
        return

    class Fixed(preflight.HostShare):  # type: ignore[name-defined,misc]
        def burst(self) -> None:
            pass

        def share(self) -> float:
            return share

    preflight.HostShare = Fixed  # type: ignore[attr-defined]


def main() -> None:
    from lorastudio.cli.train_check import check_run
    from lorastudio.jobs import preflight
    from lorastudio.jobs.preflight import preflight_report
    from lorastudio.settings import get_settings

    root, log, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    on_cpu = sys.argv[4:] == ["cpu"]
    # a tree with the contention rule reads the records' CPU clock itself (and its sample rounds'
    # fixed part at their CPU over wall seconds): its `cpu_s` is the CPU forecast, the records as
    # they are; an older tree is given the CPU-clock phases in place of the wall-clock ones
    swap = on_cpu and not hasattr(preflight, "HostShare")
    measured, measured_cpu, shares = {}, {}, {}
    for line in log.read_text(encoding="utf-8").splitlines():
        if line.startswith("{"):
            point = json.loads(line)
            measured[point["label"]] = point["measured_s"]
            measured_cpu[point["label"]] = point.get("cpu_s")
            shares[point["label"]] = point.get("host_share") or point.get("share_before")
    records = sorted((root / "home" / "run_timings").glob("*.json"))
    points = []
    # a point's own config (bench.forecast_matrix's repeats, `<name>-r<n>.json`, left out: its
    # record, where kept, is found by the point's name)
    firsts = [p for p in (root / "home").glob("fm-*.json") if p.stem.rsplit("-", 1)[1].isdigit()]
    configs = sorted(firsts, key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    for config in configs:
        cfg = json.loads(config.read_text())
        name = cfg["output_name"]
        mine = [r for r in records if name in r.name]
        if not mine:
            continue
        home = Path(tempfile.mkdtemp())
        (home / "run_timings").mkdir()
        for r in records:
            if r.name < mine[0].name:  # written before this point
                data = json.loads(r.read_text())
                if data.get("sample_work") and "sample_images" not in data:
                    data["sample_images"] = 1
                if swap:  # the CPU clock's phases for the wall clock's
                    if "cpu" not in data:
                        continue
                    data.update(data["cpu"])
                (home / "run_timings" / r.name).write_text(json.dumps(data))
        os.environ["LORASTUDIO_HOME"] = str(home)
        get_settings.cache_clear()
        cfg["output_name"] = f"{name}-replay"
        label = name[3:].rsplit("-", 1)[0]
        _fixed_share(shares.get(label))
        timing = preflight_report(check_run(cfg, get_settings(), overwrite=False, device="cpu"))["time"]
        record = json.loads(mine[0].read_text())
        points.append(
            {
                "label": label,
                # `cpu`: a tree with the contention rule turns its CPU forecast into wall seconds;
                # its CPU seconds are the forecast here (none: its `model` basis, no CPU clock)
                "forecast_s": timing.get("cpu_s", timing["total_s"]) if on_cpu else timing["total_s"],
                "source": timing["source"],
                "forecast_cpu_s": timing.get("cpu_s"),  # a CPU-clock forecast's, before the share
                "host_share": timing.get("host_share"),
                "forecast": {p["name"]: p["seconds"] for p in timing["phases"]},
                "measured_s": measured.get(label),
                "measured_cpu_s": measured_cpu.get(label),
                "record_total_s": record["total_s"],
                "measured": record["phases"],
                "measured_cpu": (record.get("cpu") or {}).get("phases"),
            }
        )
        shutil.rmtree(home)
    out.write_text(json.dumps(points, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
