"""One verdict on a run's config for the three ways in: the API's preflight (jobs/validation.
validate_run), `lorastudio train --check` (cli/train_check.check_run) and the engine's own
preflight (training/preflight.py: `train()` called directly, a CLI `--resume`). Each lists every
problem at once (RELIABILITY 684, 811): the config's own rules, the base model, the dataset, the
rules that need the scan (data/entries.scanned_problems, sample references), and lora_targets /
rank_pattern / alpha_pattern asked of the denoiser built without weights.

`every_problem` is the engine's: what its own checks found (its device's rules, the config's)
with the rest of the checks' verdict beside them, judged on a scan that decodes nothing in full
(only what the headers and the decoded record say), so a refused run never decodes its dataset
first. `targets_beside` is the CLI's and the engine's way to name the targets with the other
problems (the API asks the same in a child process: jobs/target_check.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lorastudio.config import TrainConfig
from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.settings import Settings

# fields whose problem means there is no denoiser to ask about its targets (or they were named)
_NO_TARGETS = {
    "lora_targets",
    "rank_pattern",
    "alpha_pattern",
    "family",
    "base_model",
    "base_config",
    "revision",
}


def every_problem(
    cfg: TrainConfig, settings: Settings, found: Sequence[FieldProblem], *, resume: bool = False
) -> list[FieldProblem]:
    """`found` (the engine's problems of `cfg`: its device's, the config's own, its output
    folder's) and every other problem the checks' verdict names (jobs/validation.validate_run,
    with a scan that decodes no image in full and no host rules: the engine's device checks stand
    for them; output_name left to the engine, which knows a resume's folder), and the targets
    (`targets_beside`); each (field, message) once, `found` first. `resume`: a resume's config,
    whose init_lora is not asked about (the checkpoint holds the adapter)."""
    from lorastudio.jobs.validation import validate_run

    raw = cfg.model_dump(mode="json", exclude_unset=True)
    if resume:
        raw.pop("init_lora", None)
    rest: list[FieldProblem] = []
    try:
        validate_run(
            raw,
            settings,
            live_output_names=set(),
            allow_outside_root=True,
            decode_budget_s=0.0,
            host_checks=False,
            fresh=not resume,
        )
    except ConfigError as err:
        rest = [p for p in err.problems if p.field not in ("output_name", "(config)")]
    problems = [*found, *rest]
    problems += targets_beside(raw, settings, problems)
    return dedupe(problems)


def targets_beside(
    raw: Mapping[str, Any], settings: Settings, problems: Sequence[FieldProblem]
) -> list[FieldProblem]:
    """The lora_targets / rank_pattern / alpha_pattern problems of a config refused for other
    reasons, so that they are named with the rest rather than after the others are fixed; []
    when the config itself does not parse, or its base is not found or refused (those are the
    problems then), or a problem names them already."""
    from lorastudio.config import parse_train_config, resolve_train_config
    from lorastudio.jobs.validation import with_resolved_base

    if {p.field.split(".")[0] for p in problems} & _NO_TARGETS:
        return []  # said already, or no denoiser to ask
    try:
        cfg = with_resolved_base(resolve_train_config(parse_train_config(dict(raw))), settings)
    except ConfigError:
        return []
    return target_problems(cfg)


def target_problems(cfg: TrainConfig) -> list[FieldProblem]:
    """lora_targets / rank_pattern / alpha_pattern the base's denoiser cannot honour, asked of it
    built without weights (training/adapters/lora.planned_target_problems; torch and diffusers are
    imported only when the config sets one of them), and init_lora's layers the targets miss
    (training/adapters/init_lora.init_problems, where its header passed)."""
    if not (cfg.lora_targets or cfg.rank_pattern or cfg.alpha_pattern or cfg.init_lora):
        return []
    from lorastudio import families
    from lorastudio.training.adapters.lora import planned_target_problems

    family = families.get(cfg.family)
    problems = planned_target_problems(cfg, family)
    if cfg.init_lora is not None:
        from lorastudio.settings import get_settings
        from lorastudio.training.adapters.init_lora import init_problems
        from lorastudio.training.adapters.init_lora_rules import init_lora_problems

        if not init_lora_problems(cfg, get_settings(), set()):  # the header's problems: the verdict's own
            problems += [
                p
                for p in init_problems(cfg, get_settings(), family.spec.lora_targets, set())[2]
                if p.field == "init_lora"
            ]
    return problems


def dedupe(problems: Sequence[FieldProblem]) -> list[FieldProblem]:
    """Each (field, message) once, in order (FieldProblem is frozen: equal by both)."""
    return list(dict.fromkeys(problems))
