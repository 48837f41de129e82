"""The assistant LoRA of a step-distilled base (TrainConfig.assistant_lora).

A step-distilled (turbo / few-step) base collapses when a LoRA is trained on it directly: the
LoRA learns to undo the distillation. The field's answer (ai-toolkit's training adapters, e.g.
ostris/zimage_turbo_training_adapter) is an "assistant" LoRA that roughly undoes the
distillation, merged into the frozen base while training: the new LoRA then learns only the
concept, and at inference it is used on the plain distilled base without the assistant.

Here:
  - preflight and the job service (training/adapters/assistant_rules.py, torch-free) refuse it for a base that is not step-distilled, or when
    nothing says (Family.distilled: model_index.json's is_distilled, else a known checkpoint),
    and for a file that cannot be had (offline and not in the hub cache, or missing);
  - the denoiser phase (`merge_assistant`, called by plan_build right after the base loads,
    before any quantisation or the training LoRA) adds (alpha / rank) * B @ A to each of its
    layers' frozen weights;
  - the saved LoRA holds only the trained adapter (peft's parameters); the sidecar records the
    assistant (`assistant_sidecar`);
  - sample previews render the training model, i.e. with the assistant merged.

Why hand-written: the merge is one add per layer. peft's merge_and_unload replaces the wrapped
modules and diffusers' fuse_lora leaves the adapter's modules in the model next to the trained
one; a plain add on the frozen weights leaves the denoiser as loaded plus the assistant, so the
training LoRA is added exactly as in any run and nothing of the assistant can reach its file.
The file is read by lorastudio.lora (diffusers or kohya / ComfyUI layout, alpha included).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from lorastudio.errors import ModelSourceError
from lorastudio.hub_token import hub_kwargs
from lorastudio.training.adapters.assistant_rules import hub_parts, hub_ref_damage, is_local
from lorastudio.user_paths import expand_user, is_file

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.families.base import Family

__all__ = ["assistant_file", "assistant_sidecar", "merge_assistant"]


def assistant_file(value: str) -> Path:
    """The local file of an assistant_lora value: the path itself, or the hub file (downloaded
    into the hub cache when missing). Raises ModelSourceError."""
    if is_local(value):
        path = expand_user(value)
        if not is_file(path):
            raise ModelSourceError(f"assistant_lora: file not found: {value}")
        return path
    from huggingface_hub import hf_hub_download

    from lorastudio.basemodels.hubcache import hub_cache_dir, hub_endpoint

    repo, filename = hub_parts(value)
    damage = hub_ref_damage(value)  # hf_hub_download reads the ref whole: never hand it a hostile one
    if damage is not None:
        raise ModelSourceError(f"assistant_lora: {damage}")
    try:  # the cache and endpoint of the environment now (huggingface_hub's are its import's)
        return Path(
            hf_hub_download(
                repo, filename, cache_dir=hub_cache_dir(), endpoint=hub_endpoint(), **hub_kwargs()
            )
        )
    except (OSError, ValueError) as err:
        raise ModelSourceError(f"assistant_lora: cannot get {filename} of {repo}: {err}") from err


@torch.no_grad()
def merge_assistant(denoiser: torch.nn.Module, cfg: TrainConfig, family: Family) -> dict[str, Any] | None:
    """Merge cfg.assistant_lora into the frozen base weights of `denoiser`, in place: each
    layer's weight [out, in] += (alpha / rank) * B [out, r] @ A [r, in] (computed in fp32).
    Returns {"layers", "rank", "alpha"} (None when the run has no assistant). Raises
    ModelSourceError for an unreadable file or a layer that is not a linear of this denoiser
    of the file's shape; the denoiser is then left as it was."""
    if cfg.assistant_lora is None:
        return None
    from lorastudio.lora.convert import peft_modules
    from lorastudio.lora.file_read import read_lora_file
    from lorastudio.lora.files import peft_from_file

    path = assistant_file(cfg.assistant_lora)
    tensors, metadata = read_lora_file(path)
    try:
        lora = peft_from_file(tensors, metadata, family.spec.name)
    except (ValueError, KeyError) as err:
        raise ModelSourceError(
            f"assistant_lora {path}: not a LoRA of a {family.spec.name} denoiser: {err}"
        ) from err
    layers = dict(denoiser.named_modules())
    planned = []
    for name, (a, b) in sorted(peft_modules(lora.tensors).items()):
        layer = layers.get(name)
        weight = getattr(layer, "weight", None)
        if not isinstance(layer, torch.nn.Linear) or weight is None:
            raise ModelSourceError(f"assistant_lora {path}: {name} is not a linear layer of this denoiser")
        if tuple(weight.shape) != (b.shape[0], a.shape[1]) or a.shape[0] != b.shape[1]:
            raise ModelSourceError(
                f"assistant_lora {path}: {name} is {tuple(weight.shape)} in the model, "
                f"{b.shape[0]}x{a.shape[1]} in the file"
            )
        planned.append((weight, a, b))
    scale = lora.alpha / lora.rank
    for weight, a, b in planned:
        delta = (b.to(weight.device, torch.float32) @ a.to(weight.device, torch.float32)) * scale  # [out, in]
        weight.copy_((weight.float() + delta).to(weight.dtype))
    return {"layers": len(planned), "rank": lora.rank, "alpha": lora.alpha}


def assistant_sidecar(cfg: TrainConfig) -> dict[str, Any]:
    """The sidecar's record of the run's assistant LoRA ({} without one): where it came from,
    the file's sha256, and that it was merged for training and is not part of this LoRA."""
    if cfg.assistant_lora is None:
        return {}
    path = assistant_file(cfg.assistant_lora)
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return {
        "assistant_lora": {
            "source": cfg.assistant_lora,
            "file": str(path),
            "sha256": digest.hexdigest(),
            "merged_for_training": True,
            "in_this_lora": False,
            "use_at_inference": False,
        }
    }
