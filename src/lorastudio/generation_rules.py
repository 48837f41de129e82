"""The rules of one generation request, stated once for every way in: `lorastudio generate`
(checked before the pipeline loads), POST /api/generate (GenerateBody's bounds and
jobs.generation's check) and the engine's generate_image. No torch.

- width and height: positive multiples of the family's resolution_multiple (FamilySpec), worded
  "{value}: must be a positive multiple of {multiple} for {family}" (`side_problem`; a training
  config's sample prompt sizes too, config_resolve);
- seed: 0..SEED_MAX (the training config's sample_seed range; torch's generator takes at most
  2**64 - 1);
- guidance: a finite number in 0..GUIDANCE_MAX (a sample prompt's range): inf renders NaN
  pixels (a black image), 1e308 overflows the float32 guidance tensor; on a true-CFG family
  (Qwen-Image) above 1 only with a negative prompt, which its pipeline needs to guide at all
  (`unused_guidance_problems`);
- a LoRA's scale: -LORA_SCALE_LIMIT..LORA_SCALE_LIMIT, finite;
- max_sequence_length (the text tokens the prompt is read to; None: the pipeline's 512): only for
  a family whose `supports` has it (a T5 / LLM text encoder its pipeline cuts: FamilySpec.
  no_max_sequence_length says why another takes none), 1..its max_sequence_length_max (else
  TEXT_TOKENS_MAX, the training config's bound), as a run's own (`text_tokens_problems`);
- the budget (per request, `budget_problems`): width and height each at most MAX_SIDE pixels,
  width x height at most MAX_PIXELS, steps 1..MAX_STEPS, and width x height x steps at most
  MAX_PIXEL_STEPS. The CLI checks it before the pipeline loads, the API before the worker runs;
- the prompt and the negative prompt: visible text (line breaks and tabs allowed;
  text_rules.visible_text, as a config's sample prompts), `prompt_problems`: they go into the
  image's PNG text chunks and the gallery's records, where a NUL cut the value and an ESC
  sequence or U+202E reached a terminal or the UI (RELIABILITY 1033).
"""

from __future__ import annotations

import math

from lorastudio.errors import FieldProblem
from lorastudio.text_rules import visible_text

SEED_MAX = 2**32 - 1
GUIDANCE_MAX = 100.0
LORA_SCALE_LIMIT = 4.0  # a LoRA's scale in a generation: -4..4 (the API's LoraRef, `generate --lora`)
MAX_SIDE = 4096  # pixels, width and height each
MAX_PIXELS = 2048 * 2048  # width x height: 4.2 megapixels
MAX_PIXELS_SIDE = math.isqrt(MAX_PIXELS)  # the square at the budget, named in its refusal
MAX_STEPS = 200
MAX_PIXEL_STEPS = 1024 * 1024 * 200  # width x height x steps: 200 steps at 1 MP, 50 at 4 MP
TEXT_TOKENS_MAX = 4096  # TrainConfig.max_sequence_length's bound, for a family with no cap of its own


def side_problem(field: str, value: int, family: str) -> FieldProblem | None:
    """The one size-multiple rule and wording: `value` for `field` (a width or height: a
    generation's, a sample prompt's) that is not a positive multiple of `family`'s resolution
    multiple, else None. Raises UnknownFamily."""
    from lorastudio import families

    spec = families.get(family).spec
    mult = spec.resolution_multiple
    if value < mult or value % mult:
        return FieldProblem(field, f"{value}: must be a positive multiple of {mult} for {spec.name}")
    return None


def size_problems(width: int, height: int, family: str, prefix: str = "") -> list[FieldProblem]:
    """Width / height that are not positive multiples of `family`'s resolution multiple
    (`side_problem`); fields named `prefix` + width / height ("--" for the CLI's options). Raises
    UnknownFamily."""
    found = (
        side_problem(f"{prefix}{name}", value, family)
        for name, value in (("width", width), ("height", height))
    )
    return [p for p in found if p is not None]


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


# the way out of a refused guidance where no negative prompt can be given (a run's sample prompt)
NO_NEGATIVE = (
    "a sample prompt takes no negative prompt (previews render without one), so leave guidance out "
    'of it; Generate with a negative prompt (" " for nothing in particular) renders with the scale'
)


def unused_guidance_problems(
    guidance: float | None,
    negative_prompt: str | None,
    family: str,
    prefix: str = "",
    way_out: str | None = None,
) -> list[FieldProblem]:
    """A guidance scale that `family`'s pipeline would not apply: a true-CFG family's (Qwen-Image,
    Qwen-Image-Edit: spec.guidance "true_cfg") above 1 without a negative prompt. Its pipeline runs
    the guidance pass only when `true_cfg_scale > 1` and a negative prompt is given (diffusers'
    QwenImagePipeline: `do_true_cfg`), so any scale rendered the same pixels as none, with only a
    log line saying so (RELIABILITY 1560). None (the family's default) and a scale of 1 or less
    (no guidance, as rendered) pass. An empty negative prompt is none (the request's rule).
    `way_out`: what the problem says to do (None: give a negative prompt or leave guidance out;
    a run's sample prompts, which take none: NO_NEGATIVE). Raises UnknownFamily."""
    from lorastudio import families

    spec = families.get(family).spec
    if spec.guidance != "true_cfg" or guidance is None or guidance <= 1 or negative_prompt:
        return []
    way_out = way_out or (
        'give a negative prompt (" " for nothing in particular, as its model card does) or leave guidance out'
    )
    why = (
        f"{guidance:g}: the {spec.title} pipeline applies its true CFG scale only with a negative "
        f"prompt, so it would render the image of no guidance; {way_out}"
    )
    return [FieldProblem(f"{prefix}guidance", why)]


def unguided_cfg_problems(
    guidance: float | None, runs_cfg: bool, pipeline: str, prefix: str = ""
) -> list[FieldProblem]:
    """A classifier-free guidance scale above 1 at which the pipeline `pipeline` (its class name)
    runs no CFG (`runs_cfg` False: a step-distilled FLUX.2 klein, whose pipeline only logs that it
    ignores the scale). The one rule of Generate (generate/guidance_checks.unapplied_guidance:
    `runs_cfg` from the loaded pipeline's own property) and of a run's sample prompts (training/
    guidance_rules.sample_guidance_problems: from FamilySpec.distilled_runs_no_cfg and the base's
    is_distilled) (RELIABILITY 1562, 1682). None and a scale of 1 or less pass."""
    if guidance is None or guidance <= 1 or runs_cfg:
        return []
    why = (
        f"{guidance:g}: {pipeline} runs no classifier-free guidance for this checkpoint (a "
        "step-distilled one renders without it), so it would render the image of no guidance; "
        "leave guidance out"
    )
    return [FieldProblem(f"{prefix}guidance", why)]


def text_tokens_problems(value: int | None, family: str, prefix: str = "") -> list[FieldProblem]:
    """A max_sequence_length `family`'s generation cannot take (None: the pipeline's default,
    fine): a family without the setting (the reason its spec gives), or a value outside 1..its
    cap (the family's max_sequence_length_max, else TEXT_TOKENS_MAX). Raises UnknownFamily."""
    from lorastudio import families

    if value is None:
        return []
    spec = families.get(family).spec
    field = f"{prefix}max_sequence_length"
    if "max_sequence_length" not in spec.supports:
        why = spec.no_max_sequence_length or f"the {spec.title} pipeline takes no max_sequence_length"
        return [FieldProblem(field, why)]
    cap = spec.max_sequence_length_max or TEXT_TOKENS_MAX
    if not 1 <= value <= cap:
        why = (
            f": {spec.title}'s text encoder takes at most {cap} tokens"
            if spec.max_sequence_length_max
            else ""
        )
        return [FieldProblem(field, f"{value}: must be between 1 and {cap}{why}")]
    return []


def control_resolution_problems(
    value: str | int | None, family: str, references: int, prefix: str = ""
) -> list[FieldProblem]:
    """A control_resolution generation cannot take (None: references as Generate sizes them,
    fine): one for a family without reference sizing (a text-to-image family's), one given
    without references (it would size nothing: not ignored), a value TrainConfig's
    control_resolution refuses ("pipeline", "target" or a side of 64-4096), or a side over
    MAX_PIXELS_SIDE: each reference is encoded at side x side pixels (a 512 px one upscaled to
    it), which the per-image budget bounds as it bounds the output (4096: 16.8 MP a reference,
    4x MAX_PIXELS, past the budget's memory and time). Raises UnknownFamily."""
    from lorastudio import families

    if value is None:
        return []
    spec = families.get(family).spec
    field = f"{prefix}control_resolution"
    if spec.control_sizing is None:
        return [FieldProblem(field, f"{spec.title} takes no reference images")]
    if not references:
        return [FieldProblem(field, "sizes reference images: give one, or leave it out")]
    side = isinstance(value, int) and not isinstance(value, bool) and 64 <= value <= 4096
    if value not in ("pipeline", "target") and not side:
        return [FieldProblem(field, f"{value!r}: must be 'pipeline', 'target' or a side of 64-4096 pixels")]
    if isinstance(value, int) and value > MAX_PIXELS_SIDE:
        return [
            FieldProblem(
                field,
                f"{value}: each reference would be encoded at {value}x{value} = {value * value:,} pixels, over"
                f" the generation budget of {MAX_PIXELS:,} pixels ({MAX_PIXELS_SIDE}x{MAX_PIXELS_SIDE}) per image",
            )
        ]
    return []


def budget_problems(
    width: int, height: int, steps: int | None, family: str, prefix: str = ""
) -> list[FieldProblem]:
    """What is over the generation budget (see the module docstring) or not a multiple of
    `family`'s resolution multiple (`size_problems`); [] when the request fits. steps None: the
    family's default (not checked). One problem per field at most; sides of any size (a
    400-digit width) are answered, never multiplied as floats. Fields named `prefix` + name."""
    problems = size_problems(width, height, family, prefix)
    refused = {p.field for p in problems}
    for name, value in (("width", width), ("height", height)):
        if f"{prefix}{name}" not in refused and value > MAX_SIDE:
            problems.append(
                FieldProblem(f"{prefix}{name}", f"{value} is over the generation budget of {MAX_SIDE} pixels")
            )
    steps_ok = steps is None or 1 <= steps <= MAX_STEPS
    if not steps_ok:
        problems.append(FieldProblem(f"{prefix}steps", f"{steps}: must be between 1 and {MAX_STEPS}"))
    if any(p.field in (f"{prefix}width", f"{prefix}height") for p in problems):
        return problems  # the area means something for sides in range
    pixels = width * height
    if pixels > MAX_PIXELS:
        problems.append(
            FieldProblem(
                f"{prefix}width",
                f"{width}x{height} = {pixels:,} pixels is over the generation budget of "
                f"{MAX_PIXELS:,} pixels ({MAX_PIXELS_SIDE}x{MAX_PIXELS_SIDE}) per image",
            )
        )
    elif steps is not None and steps_ok and pixels * steps > MAX_PIXEL_STEPS:
        most = MAX_PIXEL_STEPS // max(pixels, 1)
        problems.append(
            FieldProblem(
                f"{prefix}steps",
                f"{steps} steps at {width}x{height} is over the generation budget of "
                f"{MAX_PIXEL_STEPS / 1e6:.0f} M pixel-steps (at most {most} steps at this size)",
            )
        )
    return problems


def prompt_problems(texts: dict[str, str | None]) -> list[FieldProblem]:
    """A problem per prompt of `texts` (field name -> text; None: not given) holding a character
    a sample prompt may not (text_rules.visible_text: a control, invisible or text-direction
    character; line breaks and tabs are allowed), named with the characters."""
    problems = []
    for field, text in texts.items():
        try:
            visible_text(text)
        except ValueError as err:
            problems.append(FieldProblem(field, str(err)))
    return problems
