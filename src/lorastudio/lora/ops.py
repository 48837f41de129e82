"""Merging and resizing LoRA files, without the base model.

    merge_files([(Path("a.safetensors"), 0.7), (Path("b.safetensors"), 0.3)], Path("m.safetensors"))
    resize_file(Path("a.safetensors"), Path("a-r8.safetensors"), rank=8)

Hand-written because peft's `add_weighted_adapter` (combination "cat" / "svd") works on
adapters injected into a loaded model; these work on the files alone (CPU, seconds), in the
files' own layout, with the strength rules of lorastudio.lora.convert:

- merge: the weight change sum_i w_i * (alpha_i / r_i) * B_i @ A_i, exactly: the ranks are
  concatenated (peft's "cat"), each LoRA's w_i * alpha_i / r_i folded into its B rows, alpha =
  the new rank (sum of the ranks). A layer only some inputs train gets zero blocks from the others.
- resize: per layer, the truncated SVD of (alpha / r) * B @ A (convolutions flattened): the best
  rank-r approximation in Frobenius norm; B = U sqrt(S), A = sqrt(S) V^T, alpha = r. The kept
  share of the change's energy (sum of the kept S^2 over all) is reported per layer.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from lorastudio.errors import ConfigError, FieldProblem, NotFound
from lorastudio.lora.convert import FAMILIES, PeftLora, fold_strength, peft_modules
from lorastudio.lora.file_read import read_lora_file
from lorastudio.lora.files import (
    Layout,
    check_destination,
    file_for_layout,
    file_layout,
    peft_from_file,
    write_lora_file,
)
from lorastudio.lora.header import check_lora_header, read_header, shown_value
from lorastudio.lora.metadata import PREFIX, carried_header
from lorastudio.lora.names import kohya_layout
from lorastudio.lora.text_encoder_files import denoiser_part, with_text_encoders
from lorastudio.lora.text_encoders import folded_peft, split_text_encoders
from lorastudio.user_paths import is_file, missing_file

_A, _B = ".lora_A.weight", ".lora_B.weight"


def _problem(field: str, message: str) -> ConfigError:
    return ConfigError([FieldProblem(field, message)])


def merge(loras: Sequence[tuple[PeftLora, float]]) -> PeftLora:
    """One LoRA whose weight change is sum_i w_i * (alpha_i / r_i) * B_i @ A_i (see the module
    docstring). Raises ConfigError when a layer has different shapes in two inputs, a weight is
    not finite or the weighted sum overflows float32."""
    if not loras:
        raise _problem("loras", "nothing to merge")
    odd = [w for _, w in loras if not math.isfinite(w)]
    if odd:
        raise _problem("loras", f"a merge weight must be a finite number, not {odd[0]}")
    parts = [(peft_modules(lora.tensors), lora, weight) for lora, weight in loras]
    shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}  # module: (A[1:], B[0], B[2:])
    for modules, _, _ in parts:
        for m, (a, b) in modules.items():
            shape = (tuple(a.shape[1:]), (b.shape[0], *b.shape[2:]))
            if shapes.setdefault(m, shape) != shape:
                raise _problem(
                    "loras", f"layer {m} has different shapes in the inputs: {shapes[m]} vs {shape}"
                )
    rank = sum(lora.rank for _, lora, _ in parts)
    out: dict[str, torch.Tensor] = {}
    for m, (a_tail, (rows, *b_tail)) in sorted(shapes.items()):
        a_blocks, b_blocks = [], []
        for modules, lora, weight in parts:
            if m in modules:
                a, b = modules[m]
                a_blocks.append(a.float())  # [r_i, in(, kh, kw)]
                b_blocks.append(b.float() * (weight * lora.alpha / lora.rank))  # [out, r_i(, 1, 1)]
            else:
                a_blocks.append(torch.zeros(lora.rank, *a_tail))
                b_blocks.append(torch.zeros(rows, lora.rank, *b_tail))
        out[m + _A] = torch.cat(a_blocks, dim=0)  # [sum r, in(, kh, kw)]
        out[m + _B] = torch.cat(b_blocks, dim=1)  # [out, sum r(, 1, 1)]
        if not bool(torch.isfinite(out[m + _B]).all()):
            raise _problem("loras", f"the weights overflow float32 in layer {m}: use smaller merge weights")
    return PeftLora(out, rank, float(rank))


@dataclass(frozen=True)
class Resized:
    lora: PeftLora
    kept_energy: dict[str, float]  # module: share of sum S^2 kept (1.0 = exact)


def resize(lora: PeftLora, rank: int) -> Resized:
    """The best rank-`rank` approximation of every layer's change (truncated SVD; see the module
    docstring). Raises ConfigError unless 1 <= rank < the LoRA's rank."""
    if not 1 <= rank < lora.rank:
        raise _problem("rank", f"must be between 1 and {lora.rank - 1} (the LoRA's rank is {lora.rank})")
    out: dict[str, torch.Tensor] = {}
    kept: dict[str, float] = {}
    for m, (a, b) in sorted(peft_modules(lora.tensors).items()):
        delta = (lora.alpha / lora.rank) * (b.flatten(1).double() @ a.flatten(1).double())  # [out, in*k]
        u, s, vh = torch.linalg.svd(delta, full_matrices=False)  # [out, q], [q], [q, in*k]
        k = min(rank, s.numel())
        root = s[:k].sqrt()
        new_b = torch.zeros(delta.shape[0], rank, dtype=torch.float64)
        new_a = torch.zeros(rank, delta.shape[1], dtype=torch.float64)
        new_b[:, :k] = u[:, :k] * root  # [out, rank]
        new_a[:k] = root[:, None] * vh[:k]  # [rank, in*k]
        total = float((s**2).sum())
        kept[m] = float((s[:k] ** 2).sum()) / total if total > 0 else 1.0
        out[m + _A] = new_a.reshape(rank, *a.shape[1:]).to(a.dtype)
        out[m + _B] = new_b.reshape(b.shape[0], rank, *b.shape[2:]).to(b.dtype)
    return Resized(PeftLora(out, rank, float(rank)), kept)


def _facts(path: Path, family: str | None) -> tuple[str, Layout]:
    """(family, layout) of a LoRA file from its header alone (no tensor read): the family given
    or its header's, checked like a generation's LoRA (lora.header.check_lora_file: a header or
    layers of another family are refused). Raises NotFound, ModelSourceError, ConfigError."""
    if not is_file(path):
        raise NotFound(missing_file(path, "LoRA file"))
    header = read_header(path)
    family = family or header.metadata.get(PREFIX + "family")
    if not family:
        raise _problem("family", f"{path} does not name its family: pass --family")
    if kohya_layout(family) not in FAMILIES:  # Chroma, FLUX.1 Kontext, Qwen-Image-Edit: another's layout
        raise _problem("family", f"unknown family {shown_value(family)}; known: {', '.join(FAMILIES)}")
    check_lora_header(header, family)
    return family, file_layout(header.tensors, path)


def _load(path: Path, family: str) -> tuple[PeftLora, dict[str, str]]:
    """(LoRA, carried header: lorastudio.* and modelspec.architecture) of a file whose `_facts`
    passed. A file's text-encoder layers (SDXL's train_text_encoder, kohya's and OneTrainer's
    lora_te_ / lora_te1_ / lora_te2_ of SDXL, FLUX.1 and Chroma: lora/text_encoder_names.py;
    a file of them alone too) come along in peft
    naming ("text_encoder.<module>.lora_A.weight"), with the denoiser's strength and theirs
    folded into lora_B (alpha = rank): merge and resize treat them as any layer.
    Raises ConfigError for a text-encoder key of neither layout, of no layer of the family's
    encoders, or of a family that takes none (naming the key and the reason)."""
    tensors, header = read_lora_file(path)
    info = carried_header(header)  # the lorastudio.* facts and modelspec.architecture
    denoiser, text_encoders = split_text_encoders(tensors)
    if not text_encoders:
        return peft_from_file(denoiser, header, family), info
    try:
        te = folded_peft(text_encoders, header, family)  # [r, in] / [out, r], each module at scale 1
    except ValueError as err:
        raise _problem("loras", f"{path}: {err}") from None
    lora = fold_strength(
        denoiser_part(denoiser, header, family, te)
    )  # the denoiser's layers at scale 1 too (alpha = rank)
    return PeftLora({**lora.tensors, **te}, lora.rank, lora.alpha), info


def _file(
    lora: PeftLora, family: str, layout: Layout, info: dict[str, str]
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """file_for_layout of `lora`, whose tensors may hold text-encoder layers (`_load`): those
    written beside the denoiser's in the same layout (lora.text_encoder_files.with_text_encoders)."""
    denoiser, te = split_text_encoders(lora.tensors)
    tensors, header = file_for_layout(PeftLora(denoiser, lora.rank, lora.alpha), family, layout, info)
    if not te:
        return tensors, header
    scale = lora.alpha / lora.rank  # folded into the encoders' lora_B: they are written at scale 1
    folded = {k: v * scale if k.endswith(_B) and scale != 1 else v for k, v in te.items()}
    return with_text_encoders(folded, layout, tensors, header, family=family)


def merge_files(
    inputs: Sequence[tuple[Path, float]], out: Path, family: str | None = None, *, overwrite: bool = False
) -> Path:
    """Merge LoRA files of one family and one layout into `out` (that layout), weights as given.
    Raises NotFound, ModelSourceError, ConfigError (fewer than two inputs, mixed families or
    layouts, `out` exists or is an input, different layer shapes)."""
    if len(inputs) < 2:
        raise _problem("loras", "give at least two LoRA files to merge (FILE:WEIGHT ...)")
    check_destination(out, [p for p, _ in inputs], overwrite)
    facts = [_facts(path, family) for path, _ in inputs]  # every refusal below before any tensor is read
    families = {fam for fam, _ in facts}
    layouts = {layout for _, layout in facts}
    if len(families) > 1:
        raise _problem("family", f"the inputs are of different families: {', '.join(sorted(families))}")
    if len(layouts) > 1:
        raise _problem(
            "loras", "the inputs have different layouts: convert one first (lorastudio lora convert)"
        )
    ((fam, layout),) = set(facts)
    loaded = [(_load(path, fam), weight) for path, weight in inputs]
    merged = merge([(lora, weight) for (lora, _), weight in loaded])
    infos = [info for (_, info), _ in loaded]
    # only the facts every input shares: another input's steps, learning rate, seed, EMA or
    # optimizer would be a claim about weights this file is not (the first input's were copied)
    common = {k: v for k, v in infos[0].items() if all(other.get(k) == v for other in infos[1:])}
    info = {
        **common,
        PREFIX + "family": fam,
        PREFIX + "rank": str(merged.rank),
        PREFIX + "alpha": f"{merged.alpha:g}",
        PREFIX + "merged_from": json.dumps([[p.name, w] for p, w in inputs]),
    }
    tensors, header = _file(merged, fam, layout, info)
    return write_lora_file(out, tensors, header, overwrite=overwrite)


def resize_file(
    src: Path, out: Path, rank: int, family: str | None = None, *, overwrite: bool = False
) -> Resized:
    """Write `src` resized to `rank` (SVD) at `out`, in `src`'s layout; `family` defaults to the
    header's (another trainer's file may name none). Returns the Resized (kept energy per
    layer). Raises NotFound, ModelSourceError, ConfigError."""
    check_destination(out, [src], overwrite)
    family, layout = _facts(src, family)
    lora, info = _load(src, family)
    resized = resize(lora, rank)
    info = {
        **info,
        PREFIX + "rank": str(rank),
        PREFIX + "alpha": f"{float(rank):g}",
        PREFIX + "resized_from_rank": str(lora.rank),
    }
    tensors, header = _file(resized.lora, family, layout, info)
    write_lora_file(out, tensors, header, overwrite=overwrite)
    return resized
