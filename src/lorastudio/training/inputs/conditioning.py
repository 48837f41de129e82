"""Phase 1: text conditioning. Every unique caption is encoded once (plus "" when caption
dropout is on), and so is every sample prompt, with only the text encoders loaded; the encoders
are freed before phase 2. A data-parallel run shares the chunks out over its ranks and
all-gathers the results (every rank gets every caption's tensors, as one process computes them).
During training `CaptionPicker` takes one of an item's caption variants (tag shuffle / dropout,
data/caption_variants.py: each variant is encoded here like a caption) and swaps it for "" with
the item's caption dropout.

During training `CaptionPicker` swaps a caption for "" with probability cfg.caption_dropout.

A family whose prompt sees the control images (spec.prompt_sees_controls: Qwen-Image-Edit's
Qwen2.5-VL reads them) is encoded per (caption, controls): its texts are `EditPrompt`s and the
conditioning is keyed by `cond_key(caption, control files)` (the caption alone for every other
family), "" included per control set for caption dropout; caption variants compose with it
(each variant is keyed with the item's controls).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from lorastudio.data.caption_variants import captions_to_encode as captions_to_encode  # moved (no torch)
from lorastudio.families.single_file import model_source
from lorastudio.training.distributed import gather_round, group_context, round_robin
from lorastudio.training.events import Emit, ModelLoadCompleted, ModelLoadStarted, Preparing
from lorastudio.training.inputs.caption_length import cut_captions_note
from lorastudio.training.precision import free_accelerator_memory

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.families.base import Family

Conditioning = dict[str, dict[str, torch.Tensor]]  # cond_key -> per-caption tensors (CPU, no batch axis)
KEY_SEP = "\x1f"  # between a caption and its control files in a cond_key (a control char: in no caption)

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


def cond_key(caption: str, controls: Sequence[Path] = ()) -> str:
    """The conditioning key of a caption: the caption, or (controls given: a family whose prompt
    sees them) the caption and its control files' paths, in slot order."""
    return KEY_SEP.join([caption, *map(str, controls)]) if controls else caption


@dataclass(frozen=True)
class EditPrompt:
    """A caption with the control images its family's encode_prompt reads (spec.prompt_sees_controls);
    `folder_ids` as data.pairs records them (opened through data.safe_open)."""

    caption: str
    controls: tuple[Path, ...]
    folder_ids: tuple[Any, ...] = ()
    fit: tuple[int, int] | None = None  # (width, height): each image fitted to it (sample previews)

    @property
    def key(self) -> str:
        return cond_key(self.caption, self.controls)

    def images(self) -> list[Any]:
        """The control images, RGB PIL, slot order (fitted to `fit` when set, as the sample
        previews hand them to the pipeline). Raises DatasetError for an unreadable one."""
        from lorastudio.data.images import load_rgb

        ids = self.folder_ids if len(self.folder_ids) == len(self.controls) else (None,) * len(self.controls)
        images = [load_rgb(path, fid) for path, fid in zip(self.controls, ids, strict=True)]
        if self.fit is None:
            return images
        from lorastudio.generate.references import fit_reference

        return [fit_reference(image, *self.fit) for image in images]


Text = str | EditPrompt  # what phase 1 encodes: a caption, or a caption with its controls


def _key(text: Text) -> str:
    return text.key if isinstance(text, EditPrompt) else text


def edit_prompts(
    items: Sequence[Any],
    caption_dropout: float | Sequence[float],
    variants: Sequence[Sequence[str]] | None = None,
) -> list[EditPrompt]:
    """The unique (caption, controls) of a paired dataset's items (data.ImageItem), first-seen
    order: each item's caption, or each of its caption `variants` (per item, data/
    caption_variants.py), then ("", controls) for each item whose caption dropout is on
    (`caption_dropout`: one for all items, or one per item)."""
    from lorastudio.data.pairs import control_folder_ids

    dropouts = (
        [float(d) for d in caption_dropout]
        if isinstance(caption_dropout, Sequence)
        else [float(caption_dropout)] * len(items)
    )
    texts = [list(v) for v in variants] if variants is not None else [[it.caption] for it in items]
    out: dict[str, EditPrompt] = {}
    for pass_ in ("captions", "dropout"):
        for it, options, dropout in zip(items, texts, dropouts, strict=True):
            if pass_ == "dropout" and dropout <= 0:
                continue
            for caption in options if pass_ == "captions" else [""]:
                prompt = EditPrompt(caption, tuple(it.controls), control_folder_ids(it))
                out.setdefault(prompt.key, prompt)
    return list(out.values())


def _encode(family: Family, encoders: Any, texts: Sequence[Text], cfg: TrainConfig) -> list[dict]:
    """family.encode_prompts of a chunk of texts (with their control images for EditPrompts)."""
    if any(isinstance(t, EditPrompt) for t in texts):
        prompts = [t for t in texts if isinstance(t, EditPrompt)]
        if len(prompts) != len(texts):
            raise ValueError("a chunk mixes captions with and without control images")
        controls = [p.images() for p in prompts]
        return family.encode_prompts(encoders, [p.caption for p in prompts], cfg, controls=controls)
    return family.encode_prompts(encoders, list(texts), cfg)  # type: ignore[arg-type]


def item_key(family: Family, item: Any, caption: str | None = None) -> str:
    """The conditioning key of a dataset item (data.ImageItem) with `caption` (default: its own):
    cond_key with its controls where the family's prompt sees them, else the caption."""
    text = item.caption if caption is None else caption
    return cond_key(text, item.controls) if family.spec.prompt_sees_controls else text


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
    groups: Sequence[Sequence[Text]],
    *,
    dtype: torch.dtype,
    device: torch.device,
    emit: Emit,
    check_stop: Callable[[], None],
    notes: list[str] | None = None,
    said: list[str] | None = None,
    sink: Callable[[int, str, dict[str, torch.Tensor]], bool] | None = None,
    measure: Callable[[Any], None] | None = None,
    one_by_one: Collection[int] = (),
) -> list[Conditioning]:
    """Like encode_captions, for several groups of texts (e.g. the captions, then the sample
    prompts) with one load of the encoders. Each group is chunked on its own, so a group's
    tensors are those it would get encoded alone; the groups in `one_by_one` a text per call
    (the sample prompts: as Generate encodes its one prompt, so that a preview's tensors are
    bitwise Generate's; a batched matmul rounds otherwise, SDXL's pooled projection by 5e-7,
    RELIABILITY 697). Returns one cond_key -> tensors dict per group
    (an EditPrompt is encoded with its control images and keyed by caption + controls).
    `sink(group, key, tensors)` (optional) is handed each text's tensors as they come; a text it
    returns True for is left out of the result (the on-disk cache took it: conditioning_disk.py).
    The captions the text encoder cuts (the first group) are named in `said` (when given: a
    dataset warning of the run, caption_length.cut_captions_note); `measure(encoders)` (optional) is called instead once the
    encoders are loaded, for a caller that names them itself (conditioning_disk.py: the cached
    captions' counts are in their shards).

    With cfg.memory_budget_gb on a CUDA device the encoders are loaded on the CPU first and moved
    to the device only when they fit the budget (`encoder_placement`); otherwise they encode on
    the CPU and the reason is appended to `notes` (when given).

    In a data-parallel run (an initialised process group) the chunks are shared out round-robin:
    each rank encodes its chunk of every round, and the round's results are all-gathered, so
    every rank ends with every text's tensors, computed from the same chunks as one process
    would (the same tensors). A rank with no chunk at all does not load the encoders.
    `check_stop` is called once per round on every rank (it is a collective there)."""
    chunks = [
        (index, list(texts[start : start + (1 if index in one_by_one else ENCODE_CHUNK)]))
        for index, texts in enumerate(groups)
        for start in range(0, len(texts), 1 if index in one_by_one else ENCODE_CHUNK)
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
        if measure is not None:
            measure(encoders)
        elif groups and said is not None:  # the first group: the captions (and their variants)
            said += [cut] if (cut := cut_captions_note(family.spec, cfg, encoders, groups[0])) else []
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
                    for tensors in _encode(family, encoders, texts, cfg)
                ]
            for index, result in zip(members, gather_round(encoded, ctx), strict=False):
                group, texts = chunks[index]
                for text, tensors in zip(texts, result, strict=True):
                    if sink is None or not sink(group, _key(text), tensors):
                        out[group][_key(text)] = tensors
                done += len(texts)
            emit(Preparing(phase="conditioning", done=done, total=total))
    finally:
        del encoders
        free_accelerator_memory(device)
    return out


class CaptionPicker:
    """Chooses the caption used for each training sample: the item's own, or "" with
    probability `dropout` (one for all items, or one per item: its dataset entry's), drawn from
    the run's seeded numpy Generator; with caption `variants` (per item) one of them first.
    `controls` (a family whose prompt sees them): per item, its control files; the picks are
    then cond_keys."""

    def __init__(
        self,
        captions: Sequence[str],
        dropout: float | Sequence[float],
        rng: np.random.Generator,
        controls: Sequence[Sequence[Path]] | None = None,
        *,
        variants: Sequence[Sequence[str]] | None = None,
    ):
        self.captions = list(captions)
        self.dropout = (
            [float(d) for d in dropout] if isinstance(dropout, Sequence) else [float(dropout)] * len(captions)
        )
        self.rng = rng
        self.variants = [list(v) for v in variants] if variants is not None else [[c] for c in self.captions]
        self.controls = [tuple(c) for c in controls] if controls is not None else None

    def pick(self, indices: Sequence[int]) -> list[str]:
        """Conditioning keys for the items at `indices`: one of the item's caption variants (a
        draw when it has several, data/caption_variants.py), then "" by caption dropout (a draw
        when its dropout is on); with `controls`, the cond_key of that and the item's controls."""
        out = []
        for i in indices:
            options = self.variants[i]
            caption = options[int(self.rng.integers(len(options)))] if len(options) > 1 else options[0]
            picked = "" if self.dropout[i] > 0 and self.rng.random() < self.dropout[i] else caption
            out.append(cond_key(picked, self.controls[i]) if self.controls is not None else picked)
        return out
