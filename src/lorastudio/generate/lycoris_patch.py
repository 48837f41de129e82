"""LyCORIS-layout LoRA files (LoKr, LoHa, and DoRA / LoRA under `lycoris_` names) applied at
generation, where diffusers' `load_lora_weights` cannot read them (it wants `lora` in every key).

These are the files a run with `adapter = "lokr" | "loha"` (or `"dora"` with `lora_format =
"kohya"`) writes (lora/lycoris.py), third-party LyCORIS files in the same layout, and those under
kohya's names (kohya sd-scripts, LyCORIS, ai-toolkit: generate/lycoris_names.py renames them). Each one is
merged into the denoiser's weights the way ComfyUI's readers merge it (lora/lycoris.py
`comfy_delta`; DoRA: ComfyUI's `weight_decompose` on the output axis), at the requested strength:

    W <- W + strength * delta                                    (LoKr, LoHa, plain LoRA)
    W <- W + strength * ((W + delta) * dora_scale / ||W|| - W)   (DoRA, ||W|| per output row)
    W <- W + strength * ((W + delta) * dora_scale / ||W + delta|| - W)   (DoRA by LyCORIS' rule)
    W <- W + strength * diff,  b <- b + strength * diff_b        (ComfyUI's full differences)

A DoRA file's dora_scale is read by the rule its header names (lora/dora_rule.py): ComfyUI's (the
files lorastudio writes, and a file whose header tells nothing: then a warning naming it is
logged) or LyCORIS' (dora_scale = the magnitude m: kohya sd-scripts' LyCORIS, SimpleTuner); both
at a strength other than 1 interpolate as ComfyUI does.

The last are what ComfyUI's own trainer node (comfy_extras/nodes_train.py TrainLoraNode +
SaveLoRA) writes beside its LoRA pairs, `diffusion_model.<checkpoint name>.lora_up / lora_down /
alpha`: a `.diff_b` for every bias and a `.diff` for every 1-D (norm) weight of the model, trained
from zero; diffusers' loader drops both (it only logs it), so such a file is merged here whole.

A layer under the checkpoint's name of a linear that diffusers splits (FLUX.1's `img_attn.qkv`,
`txt_attn.qkv`, `linear1`; FLUX.2's q, k, v: generate/lycoris_names.py) is merged as ComfyUI merges
it into its fused checkpoint weight: the parts' weights stacked by rows into that weight, the
rule above applied once to it (one delta, one DoRA norm per output row), and the result split by
rows back into the parts.

Contract: `patch_lycoris(pipe, files)` first restores any weights a previous call patched (the
originals are kept on the CPU, so a restore is exact), then patches for `files`: a strength
changed between calls is always applied to the original weights, never on top of an earlier
patch; every module
key of every file must name a layer of the pipeline's denoiser (with a bias for a `.diff_b`)
with the patch's shape, else
ModelSourceError names them and the pipeline is left unpatched. `restore_lycoris(pipe)` puts the
original weights back. diffusers' own adapters (plain LoRA / DoRA files) are loaded on top of
the patched weights by generate/pipeline.apply_loras.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from lorastudio.errors import ModelSourceError
from lorastudio.generate.lycoris_names import Target, to_lycoris_names
from lorastudio.lora.dora_rule import COMFYUI, dora_rule_of
from lorastudio.lora.lycoris import (
    COMFY_DIFF_SUFFIXES,
    COMFY_SUFFIXES,
    PREFIX,
    LycorisError,
    comfy_delta,
    group_modules,
    module_key,
)
from lorastudio.open_reason import library_open_reason

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline

_TUCKER = frozenset({"hada_t1", "hada_t2", "lokr_t2", "lora_mid.weight"})
_SAVED = "_lorastudio_lycoris_originals"  # pipeline attribute: [(weight parameter, CPU original)]


# tensors only LyCORIS adapters have (DoRA's magnitude, LoHa's and LoKr's factors), and ComfyUI's
# full differences (`.diff`, `.diff_b`: its trainer node writes one for every bias and norm weight);
# diffusers' loader drops `dora_scale` (the DoRA would render as a plain LoRA) and `diff_b` / a
# norm's `diff` (only logged: the file would load in part), and reads none of the others
_LYCORIS_ONLY = re.compile(
    r"\.(dora_scale|hada_w[12]_[ab]|hada_t[12]|lokr_w[12](_[ab])?|lokr_t2|diff|diff_b)$"
)
_BIAS = "diff_b"
# LoRA pairs in ComfyUI's generic spelling with kohya's suffixes (`diffusion_model.<checkpoint
# name>.lora_up / lora_down.weight` + `.alpha`: its trainer node's files): diffusers' loaders read
# that spelling for no family but Qwen-Image (FLUX.1's asserts, SDXL's and Krea 2's refuse it,
# FLUX.2's and Z-Image's match no layer), so such a file is merged here by ComfyUI's rule
_GENERIC_PAIR = re.compile(r"^diffusion_model\..+\.lora_(up|down)\.weight$")


def is_lycoris_file(path: Path) -> bool:
    """Whether the safetensors file at `path` holds LyCORIS-layout keys (`lycoris_<module>.*`) or
    LyCORIS tensors under kohya's names (kohya sd-scripts / LyCORIS / ai-toolkit DoRA, LoHa, LoKr:
    generate/lycoris_names.py), or ComfyUI's own spelling (its trainer node's files: `.diff` /
    `.diff_b`, LoRA pairs as `diffusion_model.<name>.lora_up / lora_down`) rather than diffusers /
    kohya LoRA keys. False for a file
    safetensors cannot open (the loader then names the problem)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            keys = list(f.keys())
        if any(k.startswith(PREFIX) or _LYCORIS_ONLY.search(k) for k in keys):
            return True
        # a denoiser-only file in ComfyUI's spelling (one with text-encoder layers stays diffusers')
        return any(_GENERIC_PAIR.match(k) for k in keys) and all(
            k.startswith("diffusion_model.") for k in keys
        )
    except (OSError, SafetensorError):
        return False


def _denoiser(pipe: DiffusionPipeline) -> torch.nn.Module:
    for name in ("transformer", "unet"):
        module = getattr(pipe, name, None)
        if isinstance(module, torch.nn.Module):
            return module
    raise ModelSourceError(f"{type(pipe).__name__} has no transformer or unet to apply a LyCORIS LoRA to")


def _params(denoiser: torch.nn.Module, attr: str) -> dict[str, torch.nn.Parameter]:
    """{LyCORIS module key: parameter `attr` ("weight" / "bias")} of the denoiser's layers (a
    peft-wrapped layer by its own name: its base layer's; a norm's 1-D weight too)."""
    out: dict[str, torch.nn.Parameter] = {}
    for name, module in denoiser.named_modules():
        param = getattr(module, attr, None)
        if not isinstance(param, torch.nn.Parameter):
            continue
        out.setdefault(module_key(name.replace(".base_layer", "")), param)
    return out


def _patched(
    weight: torch.Tensor, parts: dict[str, torch.Tensor], strength: float, rule: str = COMFYUI
) -> torch.Tensor:
    """The weight after one module's LyCORIS tensors at `strength`, in fp32 (module docstring);
    `rule`: the file's dora_scale rule (lora/dora_rule.py), COMFYUI or LYCORIS."""
    tucker = sorted(set(parts) & _TUCKER)
    if tucker:  # conv Tucker factors: comfy_delta restates the linear layouts only
        raise LycorisError(f"Tucker-decomposed tensors ({', '.join(tucker)}) are not supported")
    base = weight.detach().float()
    flat = base.reshape(base.shape[0], -1)  # [out, in...] ([out, 1] for a norm's or a bias's)
    if "diff" in parts:  # ComfyUI's full difference: W + s * diff, the shape of the weight
        if len(parts) > 1:  # ComfyUI's load_lora keeps one patch per weight, the diff
            raise LycorisError(f"a full difference (.diff) beside {', '.join(sorted(set(parts) - {'diff'}))}")
        delta = parts["diff"].float()
        if delta.numel() != flat.numel() or delta.shape[0] != flat.shape[0]:
            raise LycorisError(f"diff {tuple(delta.shape)} vs weight {tuple(base.shape)}")
        return (flat + strength * delta.reshape(flat.shape)).reshape(base.shape)
    if "lora_up.weight" in parts:
        up, down = parts["lora_up.weight"].float(), parts["lora_down.weight"].float()
        alpha = parts.get("alpha")
        scale = float(alpha) / down.shape[0] if alpha is not None else 1.0
        delta = (up.reshape(up.shape[0], -1) @ down.reshape(down.shape[0], -1)) * scale  # [out, in]
    else:
        delta = comfy_delta(parts)  # [out, in]
    if delta.numel() != flat.numel() or delta.shape[0] != flat.shape[0]:  # rows are output rows
        raise LycorisError(f"patch {tuple(delta.shape)} vs weight {tuple(base.shape)}")
    delta = delta.reshape(flat.shape)
    if "dora_scale" in parts:
        dora = parts["dora_scale"].float().reshape(-1, 1)  # [out, 1]
        if dora.shape[0] != flat.shape[0]:  # one per output row, never broadcast
            raise LycorisError(f"dora_scale {tuple(parts['dora_scale'].shape)} vs weight {tuple(base.shape)}")
        merged = flat + delta  # [out, in...]
        normed = flat if rule == COMFYUI else merged  # ComfyUI divides by ||W||, LyCORIS by ||W + delta||
        norm = normed.norm(dim=1, keepdim=True) + torch.finfo(torch.float32).eps  # [out, 1]
        target = merged * (dora / norm)
        return (flat + strength * (target - flat)).reshape(base.shape)
    return (flat + strength * delta).reshape(base.shape)


def keep_original(pipe: DiffusionPipeline, weight: torch.nn.Parameter) -> None:
    """Keep a CPU copy of `weight` for restore_lycoris, unless one is kept already (the first
    copy is the original): for generation's other in-place patches (generate/dora_strength.py)."""
    saved = getattr(pipe, _SAVED, None)
    if saved is None:
        saved = []
        setattr(pipe, _SAVED, saved)
    if all(w is not weight for w, _ in saved):
        saved.append((weight, weight.detach().to("cpu", copy=True)))


def restore_lycoris(pipe: DiffusionPipeline) -> None:
    """Put back the weights the last `patch_lycoris` changed (exactly: copies of the originals)."""
    saved = getattr(pipe, _SAVED, None) or []
    with torch.no_grad():
        for weight, original in saved:
            weight.copy_(original.to(weight.device))
    setattr(pipe, _SAVED, [])


def patch_lycoris(pipe: DiffusionPipeline, files: Sequence[tuple[Path, float]]) -> None:
    """Restore, then merge each LyCORIS file (path, strength) into the denoiser's weights in
    order. Raises ModelSourceError naming the file and the layers that do not fit (none of the
    files is applied then)."""
    from safetensors.torch import load_file

    restore_lycoris(pipe)
    if not files:
        return
    denoiser = _denoiser(pipe)
    params = {"weight": _params(denoiser, "weight"), "bias": _params(denoiser, "bias")}
    plans: list[tuple[Path, float, dict[str, tuple[Target, dict[str, torch.Tensor]]], str]] = []
    for path, strength in files:
        try:
            grouped = group_modules(load_file(str(path)), COMFY_SUFFIXES | COMFY_DIFF_SUFFIXES)
            modules = to_lycoris_names(grouped, type(pipe).__name__)
        except (OSError, ValueError, ModelSourceError) as err:  # LycorisError is a ValueError
            raise ModelSourceError(f"cannot apply LoRA {path}: {library_open_reason(err)}") from err
        rule = _dora_rule(Path(path), modules)
        missing = sorted(
            {
                x
                for x, (target, parts) in modules.items()
                for attr in _patched_params(parts)
                if any(k not in params[attr] for k in target.keys)
            }
        )
        if missing:
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            raise ModelSourceError(
                f"LoRA {path}: {len(missing)} of its {len(modules)} layers are not layers of this "
                f"{type(pipe).__name__} ({', '.join(missing[:3])}{more}): is it another model's LoRA?"
            )
        plans.append((Path(path), float(strength), modules, rule))
    saved: dict[int, tuple[torch.nn.Parameter, torch.Tensor]] = {}  # id -> (weight, CPU original)
    try:
        with torch.no_grad():
            for path, strength, modules, rule in plans:
                for x, (target, parts) in modules.items():
                    where = f"cannot apply LoRA {path}: layer {x}"
                    for attr, own in _patched_params(parts).items():
                        layers = [params[attr][k] for k in target.keys]
                        _patch_one(
                            layers,
                            target.swapped,
                            own,
                            strength,
                            saved,
                            where if attr == "weight" else f"{where} (its bias)",
                            rule,
                        )
    finally:
        setattr(pipe, _SAVED, list(saved.values()))  # what was patched, even on a failure
    # a failure leaves no patch behind: the weights patched before it are restored
    return None


def _dora_rule(path: Path, modules: dict[str, tuple[Target, dict[str, torch.Tensor]]]) -> str:
    """The dora_scale rule of the file `path` (COMFYUI where no layer has a dora_scale), with
    the warning logged where its header tells none. Raises ModelSourceError naming the file."""
    if not any("dora_scale" in parts for _, parts in modules.values()):
        return COMFYUI
    try:
        found = dora_rule_of(path)
    except ModelSourceError as err:
        raise ModelSourceError(f"cannot apply LoRA {path}: {err}") from err
    note = found.warning(path)
    if note is not None:
        logging.getLogger(__name__).warning("%s", note)
    return found.rule


def _patched_params(parts: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """One layer's tensors by the parameter they patch: {"weight": the adapter's tensors or
    `.diff`, "bias": {"diff": its `.diff_b`}}, each only when the file has it."""
    out: dict[str, dict[str, torch.Tensor]] = {}
    weight = {k: v for k, v in parts.items() if k != _BIAS}
    if weight:
        out["weight"] = weight
    if _BIAS in parts:
        out["bias"] = {"diff": parts[_BIAS]}
    return out


def _patch_one(
    layers: list[torch.nn.Parameter],
    swapped: bool,
    parts: dict[str, torch.Tensor],
    strength: float,
    saved: dict[int, tuple[torch.nn.Parameter, torch.Tensor]],
    where: str,
    rule: str = COMFYUI,
) -> None:
    """Patch one layer of a file: the weight of `layers` stacked by rows (the checkpoint's fused
    weight of a layer split in diffusers; one layer's own weight else; `swapped`: its two row
    halves exchanged first, as the checkpoint stores them), patched once by `_patched`, then
    split by rows back into `layers`."""
    try:
        fused = torch.cat([w.detach() for w in layers], dim=0)  # [sum(out), in...]
        if swapped:
            fused = _swap_halves(fused)
        new = _patched(fused, parts, strength, rule)  # fp32, fused's shape
        if swapped:
            new = _swap_halves(new)
    except (LycorisError, KeyError, RuntimeError) as err:
        for w, original in saved.values():
            w.copy_(original.to(w.device))
        saved.clear()
        raise ModelSourceError(f"{where}: {err}") from err
    rows = torch.split(new, [w.shape[0] for w in layers], dim=0)  # each part's rows
    for weight, part in zip(layers, rows, strict=True):
        saved.setdefault(id(weight), (weight, weight.detach().to("cpu", copy=True)))
        weight.copy_(part.to(weight.dtype))


def _swap_halves(weight: torch.Tensor) -> torch.Tensor:
    """(scale, shift) rows <-> (shift, scale) rows (self-inverse; lora/convert.py's rule)."""
    first, second = weight.chunk(2, dim=0)
    return torch.cat([second, first], dim=0)
