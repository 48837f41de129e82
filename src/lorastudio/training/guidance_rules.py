"""Whether a run's TrainConfig.guidance reaches its denoiser: the guidance-distilled families
(FLUX.1, Kontext, FLUX.2 dev) feed it through the denoiser's guidance embedding, and a base
without one (FLUX.1 schnell: `guidance_embeds` false) takes no guidance, so a value set for it
would be ignored; it is refused instead. Torch-free: the engine's preflight and the job service
(jobs/validation.py) both call `guidance_problems` with what they know of the checkpoint.
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
