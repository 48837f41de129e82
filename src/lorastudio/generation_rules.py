"""The rules of one generation request, stated once for every way in: `lorastudio generate`
(checked before the pipeline loads), POST /api/generate (GenerateBody's bounds and
jobs.generation's check) and the engine's generate_image. No torch.

- width and height: positive multiples of the family's resolution_multiple (FamilySpec), worded
  "{value}: must be a positive multiple of {multiple} for {family}" (`size_problems`);
- seed: 0..SEED_MAX (the training config's sample_seed range; torch's generator takes at most
  2**64 - 1);
- guidance: a finite number in 0..GUIDANCE_MAX (a sample prompt's range): inf renders NaN
  pixels (a black image), 1e308 overflows the float32 guidance tensor;
- a LoRA's scale: -LORA_SCALE_LIMIT..LORA_SCALE_LIMIT, finite.

The server's size and steps budget (jobs/generation.py) comes on top of these.
"""

from __future__ import annotations

import math

from lorastudio.errors import FieldProblem

SEED_MAX = 2**32 - 1
GUIDANCE_MAX = 100.0
LORA_SCALE_LIMIT = 4.0  # a LoRA's scale in a generation: -4..4 (the API's LoraRef, `generate --lora`)


def size_problems(width: int, height: int, family: str, prefix: str = "") -> list[FieldProblem]:
    """Width / height that are not positive multiples of `family`'s resolution multiple; fields
    named `prefix` + width / height ("--" for the CLI's options). Raises UnknownFamily."""
    from lorastudio import families

    spec = families.get(family).spec
    mult = spec.resolution_multiple
    return [
        FieldProblem(f"{prefix}{name}", f"{value}: must be a positive multiple of {mult} for {spec.name}")
        for name, value in (("width", width), ("height", height))
        if value < mult or value % mult
    ]


def seed_problems(seed: int, prefix: str = "") -> list[FieldProblem]:
    """A seed outside 0..SEED_MAX."""
    if 0 <= seed <= SEED_MAX:
        return []
    return [FieldProblem(f"{prefix}seed", f"{seed}: must be between 0 and {SEED_MAX}")]


def guidance_problems(guidance: float | None, prefix: str = "") -> list[FieldProblem]:
    """A guidance scale that is not a finite number in 0..GUIDANCE_MAX (None: the family's)."""
    if guidance is None or (math.isfinite(guidance) and 0 <= guidance <= GUIDANCE_MAX):
        return []
    return [
        FieldProblem(
            f"{prefix}guidance", f"{guidance:g}: must be a finite number between 0 and {GUIDANCE_MAX:g}"
        )
    ]
