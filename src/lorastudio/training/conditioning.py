"""Phase 1: text conditioning. Every unique caption is encoded once (plus "" when caption
dropout is on), and so is every sample prompt, with only the text encoders loaded; the encoders
are freed before phase 2. A data-parallel run shares the chunks out over its ranks and
all-gathers the results (every rank gets every caption's tensors, as one process computes them).
During training `CaptionPicker` swaps a caption for "" with probability cfg.caption_dropout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from lorastudio.families.single_file import model_source
from lorastudio.training.distributed import gather_round, group_context, round_robin
from lorastudio.training.events import Emit, ModelLoadCompleted, ModelLoadStarted, Preparing
from lorastudio.training.precision import free_accelerator_memory

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.families.base import Family

Conditioning = dict[str, dict[str, torch.Tensor]]  # caption -> per-caption tensors (CPU, no batch axis)

ENCODE_CHUNK = 8  # captions per encoder call
# Share of a memory budget the text encoders' weights may take on the device (the rest: their
# activations and the allocator's slack); above it a budgeted run encodes on the CPU.
ENCODER_BUDGET_SHARE = 0.85
TEXT_ENCODERS = ("text_encoder", "text_encoder_2", "text_encoder_3")


def encoder_placement(
    encoder_bytes: int, device: torch.device, memory_budget_gb: float | None
) -> tuple[torch.device, str | None]:
    """Where a run encodes its texts: on `device`, unless a memory budget is set on a CUDA device
    and the encoders' weights (`encoder_bytes`) exceed ENCODER_BUDGET_SHARE of it — then on the
    CPU (captions are encoded once per run: slower, never over the budget), with the reason."""
    if memory_budget_gb is None or device.type != "cuda":
        return device, None
    if encoder_bytes <= ENCODER_BUDGET_SHARE * memory_budget_gb * 1024**3:
        return device, None
    note = (
        f"text encoders: {encoder_bytes / 1024**3:.1f} GiB of weights exceed the"
        f" {memory_budget_gb:g} GB memory budget; captions and sample prompts were encoded on the CPU"
    )
    return torch.device("cpu"), note


def encoder_bytes(pipe: object) -> int:
    """Bytes of the weights and buffers of a text pipeline's text encoders."""
    total = 0
    for name in TEXT_ENCODERS:
        module = getattr(pipe, name, None)
        if isinstance(module, torch.nn.Module):
            total += sum(t.numel() * t.element_size() for t in [*module.parameters(), *module.buffers()])
    return total


def captions_to_encode(captions: Sequence[str], caption_dropout: float) -> list[str]:
    """The unique captions, in first-seen order, plus "" when caption dropout is on."""
    unique = list(dict.fromkeys(captions))
    if caption_dropout > 0 and "" not in unique:
        unique.append("")
    return unique


def encode_captions(
    family: Family,
    cfg: TrainConfig,
    captions: list[str],
    *,
    dtype: torch.dtype,
    device: torch.device,
    emit: Emit,
    check_stop: Callable[[], None],
) -> Conditioning:
    """Load the text encoders, encode `captions` in chunks, free the encoders.

    Emits ModelLoadStarted/Completed("text_encoders") and Preparing("conditioning", done, total);
    calls `check_stop()` before each chunk (it raises to stop). Returns caption -> tensors.
    """
    return encode_texts(
        family, cfg, [captions], dtype=dtype, device=device, emit=emit, check_stop=check_stop
    )[0]


def encode_texts(
    family: Family,
    cfg: TrainConfig,
    groups: Sequence[Sequence[str]],
    *,
    dtype: torch.dtype,
    device: torch.device,
    emit: Emit,
    check_stop: Callable[[], None],
    notes: list[str] | None = None,
) -> list[Conditioning]:
    """Like encode_captions, for several groups of texts (e.g. the captions, then the sample
    prompts) with one load of the encoders. Each group is chunked on its own, so a group's
    tensors are those it would get encoded alone. Returns one text -> tensors dict per group.

    With cfg.memory_budget_gb on a CUDA device the encoders are loaded on the CPU first and moved
    to the device only when they fit the budget (`encoder_placement`); otherwise they encode on
    the CPU and the reason is appended to `notes` (when given).

    In a data-parallel run (an initialised process group) the chunks are shared out round-robin:
    each rank encodes its chunk of every round, and the round's results are all-gathered, so
    every rank ends with every text's tensors, computed from the same chunks as one process
    would (the same tensors). A rank with no chunk at all does not load the encoders.
    `check_stop` is called once per round on every rank (it is a collective there)."""
    chunks = [
        (index, list(texts[start : start + ENCODE_CHUNK]))
        for index, texts in enumerate(groups)
        for start in range(0, len(texts), ENCODE_CHUNK)
    ]
    ctx = group_context()
    out: list[Conditioning] = [{} for _ in groups]
    encoders = None
    if ctx.rank < len(chunks):
        emit(ModelLoadStarted(component="text_encoders"))
        t0 = time.perf_counter()
        budgeted = cfg.memory_budget_gb is not None and device.type == "cuda"
        load_on = torch.device("cpu") if budgeted else device
        encoders = family.load_text_encoders(model_source(cfg), cfg.revision, dtype, load_on)
        if budgeted:
            placed, note = encoder_placement(encoder_bytes(encoders), device, cfg.memory_budget_gb)
            if note is None:
                encoders.to(placed)
            elif notes is not None:
                notes.append(note)
        emit(ModelLoadCompleted(component="text_encoders", seconds=time.perf_counter() - t0))
    total = sum(len(group) for group in groups)
    done = 0
    try:
        for members, mine in round_robin(len(chunks), ctx):
            check_stop()
            encoded = None
            if mine is not None:
                texts = chunks[mine][1]
                encoded = [
                    {k: v.detach().cpu() for k, v in tensors.items()}
                    for tensors in family.encode_prompts(encoders, texts, cfg)
                ]
            for index, result in zip(members, gather_round(encoded, ctx), strict=False):
                group, texts = chunks[index]
                for text, tensors in zip(texts, result, strict=True):
                    out[group][text] = tensors
                done += len(texts)
            emit(Preparing(phase="conditioning", done=done, total=total))
    finally:
        del encoders
        free_accelerator_memory(device)
    return out


class CaptionPicker:
    """Chooses the caption used for each training sample: the item's own, or "" with
    probability `dropout`, drawn from the run's seeded numpy Generator."""

    def __init__(self, captions: Sequence[str], dropout: float, rng: np.random.Generator):
        self.captions = list(captions)
        self.dropout = dropout
        self.rng = rng

    def pick(self, indices: Sequence[int]) -> list[str]:
        """Captions for the items at `indices` (one rng draw per item when dropout is on)."""
        if self.dropout <= 0:
            return [self.captions[i] for i in indices]
        return ["" if self.rng.random() < self.dropout else self.captions[i] for i in indices]
