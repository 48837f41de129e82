"""`python -m lorastudio.training.target_check`: the engine's lora_targets / rank_pattern /
alpha_pattern check (training/adapters/lora.planned_target_check: the denoiser built on the meta
device), and init_lora's layers against the run's targets (training/adapters/init_lora.init_problems:
the file read, no model), for the torch-free API server, which runs it as a short child process
(jobs/target_check.py).

Reads one resolved TrainConfig as JSON on stdin (UTF-8 bytes, whatever the locale or
PYTHONIOENCODING say: RELIABILITY 1029); writes one JSON line on stdout:
{"problems": [{"field", "message"}, ...], "checked": bool} (problems empty: the names match, or
`checked` is false: the base's denoiser config cannot be read here, and the run's start checks).
Exit code 0 whenever that line was written.
"""

from __future__ import annotations

import json
import sys

from lorastudio import json_read


def main() -> int:
    from lorastudio import families
    from lorastudio.config import TrainConfig
    from lorastudio.training.adapters.lora import planned_target_check

    cfg = TrainConfig.model_validate(json_read.loads(sys.stdin.buffer.read()))
    family = families.get(cfg.family)
    problems = planned_target_check(cfg, family)
    if (
        cfg.init_lora is not None
    ):  # the init file's layers against the targets (training/adapters/init_lora.py)
        from lorastudio.settings import get_settings
        from lorastudio.training.adapters.init_lora import init_problems
        from lorastudio.training.adapters.init_lora_rules import init_lora_problems

        settings = get_settings()
        if not init_lora_problems(cfg, settings, set()):  # the header's problems: the server's own answer
            layers = init_problems(cfg, settings, family.spec.lora_targets, set())[2]
            problems = None if problems is None and not layers else [*(problems or []), *layers]
    found = [{"field": p.field, "message": p.message} for p in problems or []]
    print(json.dumps({"problems": found, "checked": problems is not None}))  # ASCII (ensure_ascii)
    return 0


if __name__ == "__main__":
    sys.exit(main())
