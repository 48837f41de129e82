"""Adding the LoRA adapter to a frozen denoiser, and reading it back out for export."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from lorastudio.errors import ConfigError, FieldProblem

if TYPE_CHECKING:
    from peft import LoraConfig

    from lorastudio.config import TrainConfig


def lora_config_for(cfg: TrainConfig, default_targets: tuple[str, ...]) -> LoraConfig:
    """The peft LoraConfig of a resolved cfg: rank, alpha, dropout and target module suffixes
    (cfg.lora_targets, else the family's defaults)."""
    from peft import LoraConfig

    targets = sorted(set(cfg.lora_targets or default_targets))
    return LoraConfig(
        r=int(cfg.lora_rank),
        lora_alpha=float(cfg.lora_alpha),
        lora_dropout=cfg.lora_dropout,
        target_modules=targets,
        init_lora_weights=True,
    )


def add_lora(denoiser: Any, lora_config: LoraConfig) -> list[torch.nn.Parameter]:
    """Freeze `denoiser`, inject the LoRA adapter (diffusers' PeftAdapterMixin.add_adapter) and
    return the trainable LoRA parameters, cast to float32 whatever the base dtype.

    Raises ConfigError when a requested target module name matches no layer of the denoiser.
    """
    denoiser.requires_grad_(False)
    names = [n for n, _ in denoiser.named_modules()]
    unmatched = [
        t for t in lora_config.target_modules if not any(n == t or n.endswith("." + t) for n in names)
    ]
    if unmatched:
        raise ConfigError(
            [
                FieldProblem(
                    "lora_targets",
                    f"no layer of the {type(denoiser).__name__} is named {', '.join(sorted(unmatched))}",
                )
            ]
        )
    denoiser.add_adapter(lora_config)
    params = [p for p in denoiser.parameters() if p.requires_grad]
    for p in params:
        p.data = p.data.float()
    return params


def adapter_metadata(lora_config: LoraConfig) -> dict[str, Any]:
    """The LoraConfig as the JSON-able dict diffusers stores in the file header (so a reload uses
    the trained alpha, not alpha = rank)."""
    meta = lora_config.to_dict()
    meta["target_modules"] = sorted(meta["target_modules"])
    return meta


def lora_state_dict(denoiser: Any) -> dict[str, torch.Tensor]:
    """The adapter's weights in peft naming (no adapter name), detached, contiguous, on the CPU."""
    from peft.utils import get_peft_model_state_dict

    return {k: v.detach().to("cpu").contiguous() for k, v in get_peft_model_state_dict(denoiser).items()}
