"""Whether a run's TrainConfig.guidance reaches its denoiser: the guidance-distilled families
(FLUX.1, Kontext, FLUX.2 dev) feed it through the denoiser's guidance embedding, and a base
without one (FLUX.1 schnell: `guidance_embeds` false) takes no guidance, so a value set for it
would be ignored; it is refused instead. And whether a sample prompt's own `guidance` reaches
its preview, by Generate's rules (`sample_guidance_problems`, RELIABILITY 1682). Torch-free: the
engine's preflight and the job service (jobs/validation.py) both call them with what they know
of the checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lorastudio.errors import FieldProblem

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.families.base import Family


def guidance_problems(
    cfg: TrainConfig, family: Family, facts: Mapping[str, Any] | None
) -> list[FieldProblem]:
    """cfg.guidance set to a value other than the family's default (a clone of a run carries the
    default, which changes nothing) for a base whose checkpoint `facts` (Family.checkpoint_facts
    or local_facts; None: unknown) say its denoiser has no guidance embedding. Empty otherwise,
    also when the facts do not say (the denoiser's config has no guidance_embeds)."""
    if cfg.guidance is None or "guidance" not in family.spec.supports or facts is None:
        return []
    if cfg.guidance == family.spec.defaults.get("guidance"):
        return []
    if facts.get(f"{family.spec.denoiser}.guidance_embeds") is not False:
        return []
    return [
        FieldProblem(
            "guidance",
            f"the base {cfg.base_model} has no guidance embedding (its {family.spec.denoiser} config: "
            "guidance_embeds false, e.g. FLUX.1 schnell): it takes no guidance value, so "
            f"{cfg.guidance:g} would be ignored; remove it",
        )
    ]


def sample_guidance_problems(
    cfg: TrainConfig, family: Family, facts: Mapping[str, Any] | None
) -> list[FieldProblem]:
    """Each sample prompt's own `guidance` that its preview would not apply, refused as Generate
    refuses it (one rule each, generation_rules), field "sample_prompts.<index from 0>.guidance":
    a step-distilled base whose pipeline then runs no CFG (FamilySpec.distilled_runs_no_cfg and
    the checkpoint `facts`' is_distilled true: FLUX.2 klein; unknown facts pass), and a true-CFG
    family's scale above 1 (Qwen-Image, Qwen-Image-Edit), which applies only with a negative prompt,
    which a sample prompt does not take (previews render without one). For a fresh run: a run
    recorded before this rule resumes as it did, its warning (config_samples.
    unapplied_sample_guidance_warning) saying so where it is a true-CFG family's."""
    from lorastudio.generation_rules import NO_NEGATIVE, unguided_cfg_problems, unused_guidance_problems

    spec = family.spec
    distilled = facts is not None and facts.get("is_distilled") is True
    problems: list[FieldProblem] = []
    for i, entry in enumerate(cfg.sample_prompts or []):
        guidance = getattr(entry, "guidance", None)  # a plain string takes the family's
        prefix = f"sample_prompts.{i}."
        if spec.guidance == "cfg" and spec.distilled_runs_no_cfg:
            problems += unguided_cfg_problems(guidance, not distilled, spec.pipeline_class, prefix)
        problems += unused_guidance_problems(guidance, None, spec.name, prefix, NO_NEGATIVE)
    return problems


def resumed_guidance_warning(problem: FieldProblem) -> str:
    """The warning a resume gives for a sample prompt's guidance that sample_guidance_problems
    refuses for a fresh run (a step-distilled klein's, RELIABILITY 1682): the run, recorded before
    the rule, resumes as it was, its previews rendered without that guidance (RELIABILITY 1751)."""
    return (
        f"{problem.field} {problem.message}: this run was recorded before such guidance was refused and "
        "resumes as it was, its previews rendered without it (a fresh run, or train again, refuses it)"
    )


def resume_guidance_warnings(cfg: TrainConfig, family: Family, facts: Mapping[str, Any] | None) -> list[str]:
    """What a resume of `cfg` says of its sample prompts' own guidance that no preview applies
    (a fresh run refuses it; a resume goes on as recorded): a true-CFG family's one warning
    (config_samples.unapplied_sample_guidance_warning, RELIABILITY 1641), else one
    `resumed_guidance_warning` per prompt (a step-distilled klein's, `facts` its base's:
    RELIABILITY 1751). The job service's resume answer (jobs/resume.py, RELIABILITY 1872) and
    the engine's preflight of a resume say the same."""
    if family.spec.guidance == "true_cfg":
        from lorastudio.config_samples import unapplied_sample_guidance_warning

        warning = unapplied_sample_guidance_warning(cfg)
        return [warning] if warning else []
    return [resumed_guidance_warning(p) for p in sample_guidance_problems(cfg, family, facts)]
