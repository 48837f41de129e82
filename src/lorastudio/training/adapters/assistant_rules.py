"""Whether a run may use TrainConfig.assistant_lora (training/adapters/assistant.py merges it): the base
must be known to be step-distilled (Family.distilled) and the file must be at hand. Torch-free:
the engine's preflight and the job service (jobs/validation.py) both call `assistant_problems`.
"""

from __future__ import annotations

from pathlib import Path
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
        from lorastudio.basemodels.hubcache import hub_offline

        repo, filename = hub_parts(value)
        damage = hub_ref_damage(value)
        if damage is not None:
            problems.append(FieldProblem("assistant_lora", damage))
        elif cached_hub_file(value) is None and hub_offline():
            problems.append(
                FieldProblem(
                    "assistant_lora",
                    f"offline (HF_HUB_OFFLINE=1) and {filename} of {repo} is not in the hub cache",
                )
            )
    return problems


def hub_ref_damage(value: str) -> str | None:
    """Why the hub cache's refs/main of a hub assistant_lora's repo must not be read by
    huggingface_hub (it reads a ref whole: a sparse huge one until memory runs out), with what to
    do; None when it is absent or holds a commit. Bounded (basemodels.hubcache.ref_damage)."""
    from lorastudio.basemodels.hubcache import ref_damage

    repo, _ = hub_parts(value)
    damage = ref_damage(repo)
    if damage is None:
        return None
    return f"the hub cache of {repo} is damaged ({damage}): remove that ref and fetch again"


def cached_hub_file(value: str) -> Path | None:
    """The hub cache's file of a hub assistant_lora value (owner/repo/path.safetensors) in the
    snapshot refs/main names, or None when it is not there. The ref is read bounded
    (basemodels.hubcache.cached_snapshot), never whole as huggingface_hub's try_to_load_from_cache
    read it. `value` has passed config_rules.assistant_lora_problems (no '..' part)."""
    from lorastudio.basemodels.hubcache import cached_snapshot

    repo, filename = hub_parts(value)
    snapshot = cached_snapshot(repo)
    if snapshot is None:
        return None
    path = snapshot / filename
    return path if is_file(path) else None
