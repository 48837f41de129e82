"""FLUX.1 end to end: an alias of bench/e2e_run.py with --family flux (kept for the commands of
RESULTS.md note 23). `build DIR` and `run DIR [--steps N] [--attention A] [--device D]` take the
same options as e2e_run's build / run (run: the CLI mode); the folder layout is e2e_run's
(bench/e2e_build.py).

usage (device): python -m bench.e2e_flux build /tmp/e2e && python -m bench.e2e_flux run /tmp/e2e --steps 200
"""

from __future__ import annotations

import sys

from bench.e2e_run import main

if __name__ == "__main__":
    sys.exit(main([*sys.argv[1:], "--family", "flux"]))
