"""`python -m lorastudio.training.target_check`: the engine's lora_targets / rank_pattern /
alpha_pattern check (training/lora.planned_target_problems: the denoiser built on the meta
device) for the torch-free API server, which runs it as a short child process
(jobs/target_check.py).

Reads one resolved TrainConfig as JSON on stdin; writes one JSON line on stdout:
{"problems": [{"field", "message"}, ...]} (empty: the names match, or the base's config cannot be
read here, in which case the run's start checks). Exit code 0 whenever that line was written.
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    from lorastudio import families
    from lorastudio.config import TrainConfig
    from lorastudio.training.lora import planned_target_problems

    cfg = TrainConfig.model_validate(json.loads(sys.stdin.read()))
    problems = planned_target_problems(cfg, families.get(cfg.family))
    print(json.dumps({"problems": [{"field": p.field, "message": p.message} for p in problems]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
