"""Whether a run may use TrainConfig.assistant_lora (training/assistant.py merges it): the base
must be known to be step-distilled (Family.distilled) and the file must be at hand. Torch-free:
the engine's preflight and the job service (jobs/validation.py) both call `assistant_problems`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lorastudio.errors import FieldProblem
from lorastudio.families.single_file import model_source
from lorastudio.user_paths import expand_user, is_file

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.families.base import Family


def hub_parts(value: str) -> tuple[str, str]:
    """owner/repo/path/file.safetensors -> ("owner/repo", "path/file.safetensors")."""
    parts = value.split("/")
    return "/".join(parts[:2]), "/".join(parts[2:])


def is_local(value: str) -> bool:
    """An assistant_lora value naming a local file (absolute, or from ~) rather than a hub file."""
    return value.startswith(("/", "~"))


def assistant_problems(cfg: TrainConfig, family: Family) -> list[FieldProblem]:
    """Why cfg.assistant_lora cannot be used for this run (empty when it can, or is unset).
    `cfg.base_model` must be the resolved source (a folder or a hub id). Reads, never writes."""
    value = cfg.assistant_lora
    if value is None:
        return []
    problems = []
    distilled, where = family.distilled(model_source(cfg), cfg.revision)
    if distilled is False:
        problems.append(
            FieldProblem(
                "assistant_lora",
                f"the base {cfg.base_model} is not step-distilled ({where}): an assistant LoRA only "
                "keeps a distilled (turbo) base from collapsing under training; remove it",
            )
        )
    elif distilled is None:
        problems.append(
            FieldProblem(
                "assistant_lora",
                f"cannot tell whether the base {cfg.base_model} is step-distilled: its model_index.json "
                "has no is_distilled and it is no known checkpoint (fetch it with `lorastudio models "
                "fetch <hub id>` or give the hub id); an assistant LoRA is only for distilled bases",
            )
        )
    if is_local(value):
        if not is_file(expand_user(value)):
            problems.append(FieldProblem("assistant_lora", f"file not found: {value}"))
    else:
        from huggingface_hub import try_to_load_from_cache

        from lorastudio.basemodels.hubcache import hub_cache_dir, hub_offline

        repo, filename = hub_parts(value)
        cached = try_to_load_from_cache(repo, filename, cache_dir=hub_cache_dir())
        if not isinstance(cached, str) and hub_offline():
            problems.append(
                FieldProblem(
                    "assistant_lora",
                    f"offline (HF_HUB_OFFLINE=1) and {filename} of {repo} is not in the hub cache",
                )
            )
    return problems
