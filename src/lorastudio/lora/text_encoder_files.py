"""The text encoders' part of a LoRA file in convert, merge and resize (lora/files.py,
lora/ops.py): their layers read (folded_peft: every name resolved, refused with the reason) and
written beside the denoiser's in the target layout, and a file of text-encoder layers alone
(no denoiser part) taken as such where its family is given (--family or its header)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.lora.convert import PeftLora
from lorastudio.lora.files import ADAPTER_METADATA_KEY, Layout, peft_from_file
from lorastudio.lora.text_encoder_names import KOHYA_PREFIX, NOT_DIFFUSERS
from lorastudio.lora.text_encoders import (
    folded_peft,
    to_diffusers_tensors,
    to_kohya_tensors,
    with_adapter_metadata,
)


def denoiser_part(
    denoiser: Mapping[str, torch.Tensor],
    metadata: Mapping[str, str],
    family: str,
    text_encoders: Mapping[str, torch.Tensor],
) -> PeftLora:
    """peft_from_file of a file's denoiser keys; for a file of text-encoder layers alone
    (`text_encoders`: folded_peft's, each at scale 1) an empty PeftLora at their largest rank,
    alpha = rank. Raises what peft_from_file raises; ModelSourceError for a file of neither."""
    if denoiser or not text_encoders:
        return peft_from_file(denoiser, metadata, family)
    rank = max(v.shape[0] for k, v in text_encoders.items() if k.endswith(".lora_A.weight"))
    return PeftLora({}, rank, float(rank))


def folded_text_encoders(
    tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None, family: str
) -> dict[str, torch.Tensor]:
    """folded_peft of a file's text-encoder keys; its ValueError as ConfigError (field lora)."""
    try:
        return folded_peft(tensors, metadata, family)
    except ValueError as err:
        raise ConfigError([FieldProblem("lora", str(err))]) from None


def with_text_encoders(
    tensors: Mapping[str, torch.Tensor],
    to: Layout,
    out: dict[str, torch.Tensor],
    header: dict[str, str],
    source_metadata: Mapping[str, str] | None = None,
    family: str = "sdxl",
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """`out` / `header` with the text encoders' LoRA of a `family` file (`tensors`: either
    layout, or peft naming with each module's strength folded into its lora_B) in layout `to`,
    each module's strength folded into its lora_B (alpha = rank). `source_metadata`: the header of
    the file `tensors` come from (a diffusers file's adapter config gives its encoders' alpha).
    Raises ConfigError for a key of neither layout, of no layer of the family's encoders, of a
    family that takes none, or (to diffusers) of an encoder no diffusers-layout name is read for
    (FLUX.1's and Chroma's T5: text_encoder_names.NOT_DIFFUSERS)."""
    from peft import LoraConfig

    folded = folded_text_encoders(tensors, source_metadata, family)
    if to == "kohya":
        return {**out, **to_kohya_tensors(folded, None, family)}, header
    unread = sorted(k for k in folded if (family, k.partition(".")[0]) in NOT_DIFFUSERS)
    if unread:
        raise ConfigError(
            [
                FieldProblem(
                    "to",
                    f"{family}'s {unread[0].partition('.')[0]} layers ({unread[0].removesuffix('.lora_A.weight')}"
                    f"{' ...' if len(unread) > 2 else ''}) have no diffusers-layout name any loader reads"
                    f" (ComfyUI reads T5 under kohya's {KOHYA_PREFIX[unread[0].partition('.')[0]]} names, and"
                    " generation merges it from them): keep the kohya layout (--to kohya)",
                )
            ]
        )
    ranks = {v.shape[0] for k, v in folded.items() if k.endswith(".lora_A.weight")}
    if len(ranks) != 1:
        raise ConfigError(
            [FieldProblem("lora", f"the text encoders' layers have several ranks {sorted(ranks)}")]
        )
    rank = ranks.pop()
    targets = sorted(
        {k.removesuffix(".lora_A.weight").rsplit(".", 1)[1] for k in folded if k.endswith(".lora_A.weight")}
    )
    config = LoraConfig(r=rank, lora_alpha=rank, target_modules=targets).to_dict()
    config["target_modules"] = targets
    config["rank_pattern"] = {}
    encoders = sorted({k.partition(".")[0] for k in folded})  # those the file holds
    header = with_adapter_metadata(header, config, rank, ADAPTER_METADATA_KEY, encoders)
    return {**out, **to_diffusers_tensors(folded, 1, 1.0, family)}, header
