"""LoRA files on disk: tell a file's layout, write one in either layout (staged, then
renamed), and convert a file from one layout to the other. Reading one and checking its values:
lora/file_read.py.

    convert_file(Path("run.safetensors"), Path("run-kohya.safetensors"), to="kohya")
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import torch

from lorastudio import json_read
from lorastudio.durable import fsync_path
from lorastudio.errors import ConfigError, FieldProblem, ModelSourceError, library_os_error, writing
from lorastudio.file_modes import process_umask
from lorastudio.lora.adapter_config import lora_config_dict
from lorastudio.lora.content_hash import record_content_hash
from lorastudio.lora.convert import (
    FAMILIES,
    PeftLora,
    fold_module_scales,
    fold_strength,
    pattern_scales,
    peft_modules,
    to_kohya,
)
from lorastudio.lora.convert_read import to_diffusers
from lorastudio.lora.file_read import read_lora_file
from lorastudio.lora.header import check_lora_file, shown_value
from lorastudio.lora.metadata import (
    HASH_KEY,
    HASH_PLACEHOLDER,
    PREFIX,
    carried_header,
    kohya_metadata,
    modelspec_metadata,
)
from lorastudio.lora.names import ALPHA_IN_B, kohya_layout
from lorastudio.lora.text_encoder_names import is_text_encoder_key
from lorastudio.lora.text_encoders import (
    split_text_encoders,
)
from lorastudio.staged_files import LORA_STAGING, remove_killed_staging, staging_path
from lorastudio.user_paths import MAX_NAME_BYTES, output_file_problem, publish_file

Layout = Literal["diffusers", "kohya"]
ADAPTER_METADATA_KEY = "lora_adapter_metadata"  # diffusers' header key (lora_base.py)


def denoiser_prefix(family: str) -> str:
    """The key prefix of the denoiser's layers in a diffusers LoRA file."""
    return "unet" if family == "sdxl" else "transformer"


# text-encoder LoRA keys (lora/text_encoder_names.py): diffusers' components, kohya's / OneTrainer's
# prefixes (lora_te_, lora_te1_, lora_te2_ ...)
_DIFFUSERS_TE = ("text_encoder.", "text_encoder_2.", "text_encoders.")
# kohya's, ComfyUI's generic and OneTrainer's (FLUX.1, Qwen-Image, Z-Image: lora/convert_read.py _ONETRAINER) denoiser keys
_KOHYA_DENOISER = ("lora_unet_", "diffusion_model.", "lora_transformer_")


def _mixed() -> Layout:
    raise ModelSourceError(
        "a LoRA file mixes diffusers and kohya names between its denoiser and text encoders"
    )


def detect_layout(tensors: Mapping[str, object]) -> Layout:
    """ "diffusers" (unet./transformer. + lora_A/B) or "kohya" (lora_unet_ / diffusion_model. /
    OneTrainer's lora_transformer_),
    text-encoder keys beside them in the same layout (text_encoder. / lora_te1_ ...: read or
    refused by lora/text_encoders.folded_peft), told by the key names alone (a header's tensors
    will do).
    A file of text-encoder layers alone has theirs.
    Raises ModelSourceError for anything else (or a mix)."""
    keys = list(tensors)
    encoders = [k for k in keys if is_text_encoder_key(k)]  # text-encoder LoRA beside the denoiser's
    denoiser = [k for k in keys if not is_text_encoder_key(k)]
    kohya_te = any(not k.startswith(_DIFFUSERS_TE) for k in encoders)
    if encoders and not denoiser:  # text-encoder layers alone: their layout
        return (
            "kohya"
            if all(not k.startswith(_DIFFUSERS_TE) for k in encoders)
            else "diffusers"
            if not kohya_te
            else _mixed()
        )
    if denoiser and all(k.startswith(("unet.", "transformer.")) and ".lora_" in k for k in denoiser):
        return "diffusers" if not kohya_te else _mixed()
    if denoiser and all(k.startswith(_KOHYA_DENOISER) for k in denoiser):
        return "kohya" if all(not k.startswith(_DIFFUSERS_TE) for k in encoders) else _mixed()
    odd = [k for k in keys if not k.startswith(("unet.", "transformer.", *_KOHYA_DENOISER))]
    detail = f" (e.g. {odd[0]!r})" if odd else ""
    if odd and all(k.endswith((".lora_A.weight", ".lora_B.weight")) for k in keys):
        detail += (
            ": bare peft names, as in a checkpoint's resume state (checkpoints/step-N/lora.safetensors);"
            " the run's LoRA file of that step is loras/<name>-step-N.safetensors"
        )
    if odd and all(
        k.startswith("lycoris_") for k in keys
    ):  # lora/lycoris.py: adapter lokr / loha / kohya dora
        detail += (
            ": a LyCORIS file (LoKr, LoHa or DoRA, lora/lycoris.py), which convert, merge and resize do not"
            " take (ComfyUI and lorastudio generate load it as it is)"
        )
    raise ModelSourceError(f"not a diffusers or kohya LoRA of a denoiser{detail}")


def file_layout(tensors: Mapping[str, object], path: Path) -> Layout:
    """detect_layout of the file at `path`, its refusal naming the file (`lora merge` reads
    several: "not a diffusers or kohya LoRA" said which one none of them)."""
    try:
        return detect_layout(tensors)
    except ModelSourceError as err:
        raise ModelSourceError(f"{path}: {err}") from err


def diffusers_file(
    lora: PeftLora, family: str, adapter_metadata: Mapping[str, object] | None = None
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors, header) of the diffusers file `<Pipeline>.load_lora_weights` reads: keys
    prefixed with the denoiser name, the peft LoraConfig under `lora_adapter_metadata`.
    `adapter_metadata` defaults to a LoraConfig of the LoRA's rank, alpha and module names, with
    a rank_pattern / alpha_pattern entry for each layer of another rank (the LoRA's one scale,
    alpha / rank, in every layer)."""
    prefix = denoiser_prefix(family)
    if adapter_metadata is None:
        modules = peft_modules(lora.tensors)
        # a layer of another rank gets its own rank and the alpha of the LoRA's scale (peft's
        # patterns, keyed by the full module name as diffusers' own loader writes them)
        ranks = {m: int(a.shape[0]) for m, (a, _) in modules.items() if a.shape[0] != lora.rank}
        alphas = {m: r * lora.alpha / lora.rank for m, r in ranks.items()}
        meta = lora_config_dict(lora.rank, lora.alpha, sorted(modules), ranks, alphas)
        adapter_metadata = meta
    packed = {f"{prefix}.{k}": v for k, v in adapter_metadata.items()}
    header = {"format": "pt", ADAPTER_METADATA_KEY: json.dumps(packed, indent=2, sort_keys=True)}
    return {f"{prefix}.{k}": v for k, v in lora.tensors.items()}, header


def peft_from_file(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str], family: str) -> PeftLora:
    """The LoRA of a file in either layout, in peft naming with its rank and alpha. A diffusers
    file whose layers differ in rank or alpha (its adapter config's rank_pattern / alpha_pattern,
    or tensors of several ranks) or that peft scales by alpha / sqrt(r) (use_rslora) comes back
    with each layer's own scale folded into its lora_B and alpha = rank: the PeftLora's one scale
    then holds for every layer. Raises
    ModelSourceError for a layer whose rank is not the adapter config's."""
    if detect_layout(tensors) == "kohya":
        return to_diffusers(tensors, family)
    prefix = denoiser_prefix(family) + "."
    foreign = sorted(k for k in tensors if not k.startswith(prefix))
    if foreign:
        raise ModelSourceError(f"keys not of a {family} denoiser ({prefix}...): {', '.join(foreign[:3])}")
    peft = {k.removeprefix(prefix): v for k, v in tensors.items()}
    modules = peft_modules(peft)
    rank = next(a.shape[0] for a, _ in modules.values())
    alpha = float(rank)
    if ADAPTER_METADATA_KEY not in metadata:  # diffusers' rule then: alpha = rank in every layer
        return PeftLora(peft, rank, alpha)
    packed = json_read.loads(metadata[ADAPTER_METADATA_KEY])
    rank, alpha = int(packed.get(prefix + "r", rank)), float(packed.get(prefix + "lora_alpha", alpha))
    rank_pattern = dict(packed.get(prefix + "rank_pattern") or {})
    alpha_pattern = dict(packed.get(prefix + "alpha_pattern") or {})
    rslora = packed.get(prefix + "use_rslora") is True  # peft's scale alpha / sqrt(r), not alpha / r
    uniform = all(a.shape[0] == rank for a, _ in modules.values())
    if not rank_pattern and not alpha_pattern and not rslora and uniform:
        return PeftLora(peft, rank, alpha)
    return fold_module_scales(
        PeftLora(peft, rank, alpha), pattern_scales(modules, rank, alpha, rank_pattern, alpha_pattern, rslora)
    )


def follow_umask(path: Path | str) -> None:
    """Give a file safetensors wrote (always 0600) the mode every other file the studio writes
    gets: 0666 less the umask. A LoRA file, and a checkpoint's (training/resume/snapshot.py: another
    user of a group's shared home, umask 002, could not resume from a checkpoint 0600)."""
    os.chmod(path, 0o666 & ~process_umask())


def check_destination(out: Path, inputs: Sequence[Path], overwrite: bool) -> None:
    """Refuse a destination the LoRA commands (convert, merge, resize) cannot or should not write,
    before anything is read: what user_paths.output_file_problem refuses (a name that does not
    end in .safetensors among them: diffusers' load_lora_weights tells the format by the suffix
    and unpickles any other file) and an input. Raises ConfigError (field "out") naming the path
    and the reason."""
    fits = len(out.name.encode("utf-8", "surrogateescape")) <= MAX_NAME_BYTES  # else resolve() raises
    if fits and any(out.resolve() == p.resolve() for p in inputs):
        why: str | None = "the output must be another file than the input"
    else:
        why = output_file_problem(out, (".safetensors",), overwrite, "--force")
    if why is not None:
        raise ConfigError([FieldProblem("out", why)])


def write_lora_file(
    path: Path, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str], *, overwrite: bool = True
) -> Path:
    """Write a .safetensors file next to `path`, fsync it, then rename it into place and fsync
    the folder (as a checkpoint is written): no partial file is ever visible at `path`, and after
    a power loss `path` holds the old file or the whole new one. Without `overwrite`, a file that
    appeared at `path` meanwhile is kept (user_paths.publish_file) and ConfigError (field "out")
    says so. The header's `modelspec.hash_sha256` is the tensors' (record_content_hash), in
    every file this writes. A tensor holding a NaN or an infinity is refused before anything is
    written (ModelSourceError naming `path` and the tensor: e.g. a source file's huge alpha /
    rank folded into a bf16 lora_B overflows it), as every reader refuses such a file.
    Returns `path`."""
    import safetensors.torch

    for key, value in tensors.items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            bad = int(value.numel() - torch.isfinite(value).sum())
            raise ModelSourceError(
                f"{path} not written: its tensor {key[:120]!r} would hold {bad} NaN or infinite value(s)"
                f" ({str(value.dtype).removeprefix('torch.')}: the source's values times its alpha / rank"
                " do not fit it)"
            )
    remove_killed_staging(path.parent, LORA_STAGING)  # what killed writes left there (staged_files.py)
    staged = staging_path(path, LORA_STAGING)  # `.<name>.<pid>-<hex>.staging`: this process's
    try:
        with writing(f"the LoRA file {path.name} could not be written", path):
            try:
                safetensors.torch.save_file(
                    {k: v.contiguous() for k, v in tensors.items()},
                    str(staged),
                    metadata={**metadata, HASH_KEY: HASH_PLACEHOLDER},
                )
            except safetensors.SafetensorError as err:  # its I/O errors: the errno only in its text
                raise library_os_error(err, staged) or err from err
            record_content_hash(staged)
            follow_umask(staged)
            fsync_path(staged)
            if why := publish_file(staged, path, overwrite, "--force"):
                raise ConfigError([FieldProblem("out", why)])
            fsync_path(path.parent)
    finally:
        staged.unlink(missing_ok=True)
    return path


SAVE_DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


# DoRA's per-row scales stay fp32 in every file: each multiplies a whole row of the weight, base
# included (ComfyUI's `.dora_scale`, peft's `lora_magnitude_vector`), so rounding it to bf16 moves
# every weight of the row by up to 2^-9 of its value, trained or not (bench/comfyui_check.py
# measured 6e-4 on an unchanged tiny layer); it is one value per output row
FP32_PARTS = (".dora_scale", ".lora_magnitude_vector")


def cast_for_file(tensors: Mapping[str, torch.Tensor], save_dtype: str) -> dict[str, torch.Tensor]:
    """`tensors` with every floating tensor in TrainConfig.save_dtype `save_dtype` (fp32 / bf16 /
    fp16), except DoRA's per-row scales (FP32_PARTS: kept fp32); other tensors unchanged.
    Raises ConfigError (field save_dtype) naming the first tensor whose finite values do not fit
    the dtype (fp16 tops out at 65504), rather than writing inf."""
    dtype = SAVE_DTYPES[save_dtype]
    out = {}
    for key, value in tensors.items():
        if any(part in key for part in FP32_PARTS) and value.is_floating_point():
            out[key] = value.float()
            continue
        if not value.is_floating_point() or value.dtype == dtype:
            out[key] = value
            continue
        cast = value.to(dtype)
        if not bool(torch.isfinite(cast).all()) and bool(torch.isfinite(value).all()):
            limit = torch.finfo(dtype).max
            raise ConfigError(
                [
                    FieldProblem(
                        "save_dtype",
                        f"{key} holds values beyond {save_dtype}'s range ({limit:g}): use bf16 or fp32",
                    )
                ]
            )
        out[key] = cast
    return out


def file_for_layout(
    lora: PeftLora,
    family: str,
    layout: Layout,
    info: Mapping[str, str],
    adapter_metadata: Mapping[str, object] | None = None,
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors, header) of `lora` in `layout`; `info` = the `lorastudio.*` header strings;
    `adapter_metadata` = the peft LoraConfig dict a diffusers file records (default: built from
    the LoRA's rank, alpha and module names). A diffusers file holds alpha/rank folded into its
    lora_B weights and records alpha = rank (see convert.fold_strength): ComfyUI, which reads no
    alpha from a diffusers file, then applies the same weight as diffusers."""
    info = {**info, PREFIX + "lora_format": layout}
    info = {**info, **modelspec_metadata(info)}  # the SAI model spec's keys, in every layout
    if not lora.tensors:  # text-encoder layers alone (denoiser_part): with_text_encoders adds them
        kohya = kohya_metadata(info, lora.rank, lora.rank) if layout == "kohya" else {}
        return {}, {"format": "pt", **info, **kohya}
    if layout == "kohya":
        tensors = to_kohya(lora.tensors, family, lora.alpha, lora.rank)
        # a layout with alpha / rank folded into lora_B (Krea 2) holds alpha = rank, as a diffusers file
        alpha = lora.rank if kohya_layout(family) in ALPHA_IN_B else lora.alpha
        return tensors, {"format": "pt", **info, **kohya_metadata(info, lora.rank, alpha)}
    lora = fold_strength(lora)
    if adapter_metadata is not None:
        # every module now at alpha = its rank (also a rank_pattern module: see
        # training.adapters.export.fold_module_strengths)
        ranks = dict(adapter_metadata.get("rank_pattern") or {})  # type: ignore[call-overload]
        adapter_metadata = {**adapter_metadata, "lora_alpha": float(lora.rank), "alpha_pattern": ranks}
    tensors, header = diffusers_file(lora, family, adapter_metadata)
    return tensors, {**header, **info}


def convert_file(
    src: Path, dst: Path, to: Layout, family: str | None = None, *, overwrite: bool = False
) -> Layout:
    """Convert the LoRA file `src` to layout `to` at `dst`; returns the layout `src` had.

    family: taken from the file header (`lorastudio.family`) when not given.
    Raises NotFound, ModelSourceError (unreadable / unknown layout), ConfigError (no family,
    unknown family, a `dst` that check_destination refuses, or a layer with no name in the target
    layout).
    """
    if to not in ("diffusers", "kohya"):
        raise ConfigError([FieldProblem("to", f"must be diffusers or kohya, not {to!r}")])
    check_destination(dst, [src], overwrite)
    tensors, metadata = read_lora_file(src)
    family = family or metadata.get(PREFIX + "family")
    if not family:
        raise ConfigError([FieldProblem("family", f"{src} does not name its family: pass --family")])
    if kohya_layout(family) not in FAMILIES:
        raise ConfigError(
            [FieldProblem("family", f"unknown family {shown_value(family)}; known: {', '.join(FAMILIES)}")]
        )
    check_lora_file(src, family)  # a --family its header or layers contradict: generation's check
    source_layout = file_layout(tensors, src)
    denoiser, text_encoders = split_text_encoders(tensors)  # text-encoder LoRA beside the denoiser's
    from lorastudio.lora.text_encoder_files import denoiser_part, folded_text_encoders, with_text_encoders

    try:  # a fold of alpha / rank that overflows (convert.fold_module_scales) named with the file
        if text_encoders:  # refused (naming the key and why) before the denoiser's names are read
            text_encoders = folded_text_encoders(text_encoders, metadata, family)
        lora = denoiser_part(denoiser, metadata, family, text_encoders)
        info = carried_header(metadata)
        info[PREFIX + "family"] = family
        out_tensors, header = file_for_layout(lora, family, to, info)
    except ModelSourceError as err:
        raise err if str(src) in str(err) else ModelSourceError(f"{src}: {err}") from None
    if text_encoders:
        out_tensors, header = with_text_encoders(text_encoders, to, out_tensors, header, family=family)
    write_lora_file(dst, out_tensors, header, overwrite=overwrite)
    return source_layout
