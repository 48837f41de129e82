"""One generation request checked before any work, every problem at once (GenerationService.check,
jobs/generation.py): the family, the revision, the size and steps against the budget
(generation_rules.budget_problems), the negative prompt, the text tokens, the references, the LoRA
files (their headers read with a size cap and checked, lora/header.py; each file's sha256 taken,
lora/file_digest.py) and the base model (resolved, its single-file updates, its identity against
the one asked for, jobs/generation_base.py). No torch.
"""

from __future__ import annotations

from pathlib import Path

from lorastudio import families
from lorastudio.basemodels import ResolvedBase, resolve_base
from lorastudio.basemodels.single_file import base_updates
from lorastudio.config import local_revision_problem, revision_problem
from lorastudio.data.sample_refs import reference_size_problem
from lorastudio.errors import ConfigError, FieldProblem, LorastudioError, ModelSourceError, NotFound
from lorastudio.generation_rules import (
    budget_problems,
    control_resolution_problems,
    prompt_problems,
    text_tokens_problems,
    unused_guidance_problems,
)
from lorastudio.jobs.generation_base import check_identity
from lorastudio.jobs.generation_inputs import GenerationRequest, lora_file, negative_prompt_refusal
from lorastudio.jobs.references import reference_problems
from lorastudio.lora.file_digest import lora_digest
from lorastudio.lora.header import check_lora_file
from lorastudio.settings import Settings


def check_request(
    settings: Settings, req: GenerationRequest
) -> tuple[ResolvedBase, list[tuple[str, float]], tuple[str, ...]]:
    """Check everything about `req` before any work: returns (the resolved base model,
    [(LoRA file, scale)], each LoRA file's sha256). Raises UnknownFamily, ConfigError
    (revision, size budget, a LoRA file that is not a LoRA of this family or not the file
    of the sha256 asked for, the base model or its base_config: every problem at once), NotFound
    (a LoRA name)."""
    family = families.get(req.family)
    problems = budget_problems(req.width, req.height, req.steps, family.spec.name)
    problems += prompt_problems({"prompt": req.prompt, "negative_prompt": req.negative_prompt})
    if req.revision is not None and (why := revision_problem(req.revision)):
        problems.append(FieldProblem("revision", why))
    elif why := local_revision_problem(req.base_model, req.revision, req.base_config):
        problems.append(FieldProblem("revision", why))  # a folder has no revision: not ignored
    if req.negative_prompt and not family.spec.negative_prompt:
        problems.append(FieldProblem("negative_prompt", negative_prompt_refusal(family.spec)))
    problems += text_tokens_problems(req.max_sequence_length, family.spec.name)
    problems += control_resolution_problems(req.control_resolution, family.spec.name, len(req.references))
    problems += unused_guidance_problems(req.guidance, req.negative_prompt, family.spec.name)
    problems += reference_problems(settings, family.spec.name, req.references)
    small = reference_size_problem(family.spec.name, family.spec.min_reference_side, req.width, req.height)
    if req.references and small:
        problems.append(FieldProblem("references", small))
    loras = [(lora_file(settings, c.name, c.step, c.weights), c.scale) for c in req.loras]
    digests: list[str] = []
    for i, ((path, _), choice) in enumerate(zip(loras, req.loras, strict=True)):
        try:
            check_lora_file(path, family.spec.name)
            digests.append(lora_digest(path))
        except (ModelSourceError, NotFound) as err:
            problems.append(FieldProblem(f"loras.{i}", str(err)))
            continue
        if choice.sha256 is not None and choice.sha256 != digests[-1]:
            problems.append(
                FieldProblem(
                    f"loras.{i}.sha256",
                    f"LoRA {choice.name!r} is no longer the file of that sha256 (now {digests[-1]}): "
                    "its run was retrained or the file replaced; leave sha256 out to use the file as it is",
                )
            )
    base = None
    if not any(p.field == "revision" for p in problems):  # a bad revision never reaches the hub cache
        try:  # named by its field with the rest, as the training preflight names it: the form shows
            # it at the base model's input (a bare ModelSourceError had no field: a banner)
            base = resolve_base(req.base_model, family.spec.name, settings, req.revision, req.base_config)
        except ModelSourceError as err:
            field = "base_config" if str(err).startswith("base_config ") else "base_model"
            problems.append(FieldProblem(field, str(err)))
        except ConfigError as err:  # a revision with a local folder (resolve_base)
            problems += err.problems
    if problems or base is None:
        raise ConfigError(problems)
    _, base_problems = base_updates(
        base.source, base.folder, base.file, base.config, req.base_config, req.v_prediction, req.revision
    )
    if base_problems:
        raise ConfigError(base_problems)
    _, changed = check_identity(req.base_identity, base, family.spec.denoiser, req.revision, req.base_model)
    if changed is not None:  # jobs/generation_base.py
        raise ConfigError([changed])
    configs = base.configs  # where the checkpoint's flavour is read (a single file: its base config)
    folder = Path(configs).expanduser() if isinstance(configs, (str, Path)) else None
    flavour = family.folder_variant(folder) if folder is not None and folder.is_dir() else None
    if flavour is not None and flavour.control_images is not None:
        # the checkpoint's flavour may take fewer (Qwen-Image-Edit: 1; Plus: 0-3) or need one
        # (Qwen-Image-Edit: its pipeline renders no text-to-image)
        problems = reference_problems(settings, family.spec.name, req.references, flavour)
        if problems:
            raise ConfigError(problems)
    return base, [(str(p), s) for p, s in loras], tuple(digests)


def planned_steps(req: GenerationRequest, base: ResolvedBase) -> int:
    """The denoising steps request `req` will take with its resolved `base`: its own, else the
    family's generation default for the base's flavour (Family.generation_defaults over the base's
    configs read as plain JSON: Family.local_facts; a base whose configs are not on disk: the
    family's own), as generate.pipeline.generate_image takes them; 0 where none is known. Said by
    a generation's progress and record before its worker reports its first step (RELIABILITY 1831)."""
    if req.steps is not None:
        return req.steps
    family = families.get(req.family)
    try:
        facts = family.local_facts(str(base.configs), req.revision)
    except (LorastudioError, OSError, ValueError):  # an unreadable base: the worker's own check words it
        facts = None
    steps = family.generation_defaults(facts or {}).get("num_inference_steps")
    return steps if isinstance(steps, int) and steps > 0 else 0
