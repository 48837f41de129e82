"""The text-encoder half of a run started from a LoRA file (TrainConfig.init_lora): an SDXL file's
text-encoder layers put into the run's text-encoder LoRA (training/adapters/text_encoders.py) at the run's
alpha / rank. Their checks before any model loads are init_lora.text_encoder_problems; the
denoiser's half is init_lora.load_init_lora."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from lorastudio.errors import ModelSourceError
from lorastudio.training.adapters.init_lora import InitSource, listed, read_init_lora
from lorastudio.training.adapters.init_lora_rules import unchanged_since_preflight

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig


@torch.no_grad()
def load_init_text_encoders(text_encoders: Any, source: InitSource, cfg: TrainConfig) -> str | None:
    """Put the file's text-encoder layers into the run's text-encoder LoRA (`text_encoders`, a
    training.adapters.text_encoders.TextEncoderLora), each at the run's alpha / rank (B' = B_folded * r /
    alpha). Returns the warning about its layers the file lacks (they start fresh), None when
    there are none. Raises ModelSourceError for a layer of no adapter or of another shape, or a
    file that changed since the preflight hashed it."""
    from lorastudio.lora.text_encoders import file_module

    _, folded = read_init_lora(source.path, cfg.family)
    unchanged_since_preflight(
        source.path, source.sha256
    )  # the bytes the preflight hashed (the denoiser's load checks them again)
    scale = float(cfg.lora_alpha) / int(cfg.lora_rank)
    params = {}  # the files' "<encoder>.text_model.<module>.lora_A.weight" -> the run's parameter
    for name, param in text_encoders.named_parameters().items():  # "<encoder>.<module>.lora_A.default.weight"
        encoder, _, rest = name.partition(".")
        params[f"{encoder}.{file_module(rest.replace('.default.', '.'))}"] = param
    for key, value in folded.items():
        param = params.get(key)
        if param is None or tuple(param.shape) != tuple(value.shape):
            raise ModelSourceError(
                f"init_lora {source.path}: its text-encoder layer {key} fits no layer of the run's text-encoder LoRA"
            )
        param.copy_((value.float() / scale if ".lora_B." in key else value.float()).to(param.device))
    fresh = sorted({k.rsplit(".lora_", 1)[0] for k in params} - {k.rsplit(".lora_", 1)[0] for k in folded})
    if not fresh:
        return None
    return (
        f"init_lora {source.path.name}: {len(fresh)} of the run's text-encoder LoRA layers are not in the file "
        f"and start fresh: {listed(fresh)}"
    )
