"""Print the probe rows (JSON lines on stdin) as short dicts: the fields a session reads first."""

import json
import sys

KEYS = (
    "family", "variant", "batch", "s_per_step", "samples_per_s", "x_base", "peak_gib", "peak_first_steps_gib",
    "first_step_s", "parity_max_rel", "finite", "fa4_processors", "fallback", "crash", "timeout", "stderr",
)  # fmt: skip
for line in sys.stdin:
    if line.startswith("{"):
        row = json.loads(line)
        print({k: row[k] for k in KEYS if k in row}, flush=True)
