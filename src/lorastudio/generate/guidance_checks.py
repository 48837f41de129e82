"""The guidance checks generate_image makes on the loaded pipeline: a negative prompt or a CFG
scale that the pipeline's own rule would not apply (its `do_classifier_free_guidance` property,
QwenImagePipeline's `true_cfg_scale > 1`) is refused, never rendered as if it were not there
(RELIABILITY 1562; the rules that need no pipeline: lorastudio.generation_rules)."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from lorastudio.errors import FieldProblem
from lorastudio.generation_rules import unguided_cfg_problems

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline

    from lorastudio.families.spec import FamilySpec


def unapplied_guidance(
    pipe: DiffusionPipeline,
    spec: FamilySpec,
    guidance: float | None,
    negative_prompt: str | None,
    scale: Any,
) -> list[FieldProblem]:
    """What of `guidance` / `negative_prompt` `pipe` (of family `spec`) would ignore: a negative
    prompt where it runs no classifier-free guidance at `scale` (the guidance asked, else the
    family's default), and a CFG scale above 1 at which its own rule runs none (a step-distilled
    FLUX.2 klein, whose pipeline only logs that it ignores it)."""
    problems: list[FieldProblem] = []
    if negative_prompt and spec.negative_prompt and not guidance_on(pipe, spec.guidance_kwarg, scale):
        problems.append(
            FieldProblem(
                "negative_prompt",
                f"ignored at guidance {scale}: {type(pipe).__name__} reads a negative prompt only when "
                "it runs classifier-free guidance, which is off at this scale; raise guidance or leave it out",
            )
        )
    # a CFG scale the pipeline's own rule runs no guidance at (a step-distilled FLUX.2 klein):
    # the rule a run's sample prompts are checked by too (generation_rules.unguided_cfg_problems)
    if spec.guidance == "cfg" and guidance is not None and guidance > 1:
        runs = guidance_on(pipe, spec.guidance_kwarg, guidance)
        problems += unguided_cfg_problems(guidance, runs, type(pipe).__name__)
    return problems


def guidance_on(pipe: DiffusionPipeline, keyword: str, scale: float | None) -> bool:
    """Whether `pipe` runs classifier-free guidance (the pass that reads the negative prompt) at
    guidance `scale` (None: its __call__ default), by the pipeline's own rule: its
    `do_classifier_free_guidance` property (SDXL, Chroma: scale > 1; Z-Image, Krea 2: > 0), or
    QwenImagePipeline's `true_cfg_scale > 1`. True when the pipeline states no rule."""
    if scale is None:
        param = inspect.signature(type(pipe).__call__).parameters.get(keyword)
        scale = param.default if param is not None and isinstance(param.default, (int, float)) else None
    if scale is None:
        return True
    if keyword == "true_cfg_scale":
        return float(scale) > 1
    rule = getattr(type(pipe), "do_classifier_free_guidance", None)
    if not isinstance(rule, property) or rule.fget is None:
        return True
    had, before = "_guidance_scale" in vars(pipe), vars(pipe).get("_guidance_scale")
    pipe._guidance_scale = float(scale)  # what __call__ sets before it asks the property
    try:
        return bool(rule.fget(pipe))
    finally:
        if had:
            pipe._guidance_scale = before
        else:
            del pipe._guidance_scale
