"""Where a run's time before its first weights read goes (issue 31 item 1: on the H200, FLUX.1's
CLI run spent 14.8 s between the process start and the first weights read, RESULTS note 27).

    python -m bench.profile_start DIR --family flux [--tiny] [--device cuda] [--top 30] [--out OUT]

Uses bench.e2e_run's pipeline folder and config (DIR as there; `--tiny` builds lorastudio.tiny's
pipeline there in seconds, or give the real folder that `e2e_run build` made). Runs the CLI's path
(the CLI's config loader, then training.loop.train) under cProfile from this module's start, torch's
import included, and ends the run at its first ModelLoadStarted event. Prints each lorastudio log
record and event before it with its time, then the functions with the most cumulative time
(writes OUT/profile_start.txt too). A bench tool: the run is cut short on purpose.
"""

from __future__ import annotations

import cProfile
import time

T0 = time.monotonic()
PROFILE = cProfile.Profile()
PROFILE.enable()  # before torch, diffusers and lorastudio are imported

import argparse  # noqa: E402
import contextlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import pstats  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402


class _FirstLoad(Exception):
    """Raised from the event sink at the first ModelLoadStarted: the part measured ends there."""


class _Stamped(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("lorastudio"):
            self.lines.append(
                f"{time.monotonic() - T0:7.2f} s  log {record.name}: {record.getMessage()[:200]}"
            )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path)
    parser.add_argument("--family", default="flux")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--device", default=None)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    lines: list[str] = [f"{time.monotonic() - T0:7.2f} s  arguments parsed"]

    from bench import e2e_build

    if not (e2e_build.pipeline_dir(args.root, args.family) / "model_index.json").is_file():
        if not args.tiny:
            print(
                f"no pipeline under {args.root}: run `python -m bench.e2e_run build` first", file=sys.stderr
            )
            return 2
        PROFILE.disable()  # built in another process: this one's imports stay a run's
        build = ["build", str(args.root), "--family", args.family, "--tiny"]
        subprocess.run([sys.executable, "-m", "bench.e2e_run", *build], check=True, stdout=subprocess.DEVNULL)
        PROFILE.enable()
        lines.append(f"{time.monotonic() - T0:7.2f} s  tiny pipeline built (another process, not profiled)")

    from bench import e2e_run  # torch, diffusers: part of a run's start

    os.environ["LORASTUDIO_HOME"] = str(e2e_build.home_dir(args.root).resolve())
    cfg = e2e_run.train_config(args.root, args.family, "start", 2, args.tiny, "auto")
    e2e_run._fresh_output(args.root, cfg["output_name"])
    path = args.root / "train-profile-start.json"
    path.write_text(json.dumps(cfg))
    handler = _Stamped(lines)
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.DEBUG)
    lines.append(f"{time.monotonic() - T0:7.2f} s  bench imports done")

    from lorastudio.cli.config_file import load_config_file
    from lorastudio.config import parse_train_config
    from lorastudio.training import loop

    lines.append(f"{time.monotonic() - T0:7.2f} s  lorastudio.training.loop imported")
    config = parse_train_config(load_config_file(path))
    lines.append(f"{time.monotonic() - T0:7.2f} s  config parsed")

    def sink(event: Any) -> None:
        lines.append(f"{time.monotonic() - T0:7.2f} s  event {event.type}")
        if event.type == "model_load_started":
            raise _FirstLoad

    device = args.device or ("cpu" if args.tiny else "cuda")
    with contextlib.suppress(_FirstLoad):  # raised by the sink: the measured part ends there
        loop.train(config, sink, device=device)
    PROFILE.disable()
    lines.append(f"{time.monotonic() - T0:7.2f} s  first weights read begins (profile ends)")
    text = io.StringIO()
    pstats.Stats(PROFILE, stream=text).sort_stats("cumulative").print_stats(args.top)
    report = "\n".join(lines) + "\n\n" + text.getvalue()
    print(report)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "profile_start.txt").write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
