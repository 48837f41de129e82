"""A LoHa, LoKr or LyCORIS-layout DoRA file as a run's start (TrainConfig.init_lora with adapter
"loha" / "lokr", or "dora" and a file with `.dora_scale` keys): the LyCORIS layout lorastudio
writes for them (lora/lycoris.py: `lycoris_<diffusers name>`) and the kohya-named LyCORIS files of
other trainers (generate/lycoris_names.to_lycoris_names, the names generation merges them under),
put into the run's peft adapter.

LoHa / LoKr: each file layer's factors are copied into the peft layer's parameters of the same
names (peft and LyCORIS share them: hada_w1_a ... / lokr_w1, lokr_w2_a ...; shapes must match:
the run's lokr_factor / lokr_decompose_both / rank as the run that wrote it), then one factor
(hada_w1_a, lokr_w1 or lokr_w1_a) is scaled so that peft's weight change (its get_delta_weight,
at the run's alpha / rank) equals ComfyUI's of the file (lora/lycoris.comfy_delta, its alpha
rule) in that layer; a layer whose changes are not proportional (another factorisation) is
refused. DoRA (lora_up / lora_down / alpha / dora_scale): A and B as a LoRA's, peft's magnitude
from the dora_scale by the rule the file's header names (lora/dora_rule.py: LyCORIS' dora_scale is
m itself; ComfyUI's, the files lorastudio writes, gives m with the run's base weight: `_load_dora`). A kohya layer of several diffusers
layers (FLUX.1's fused qkv, linear1; FLUX.2's q, k, v) or of swapped row halves (the final adaLN)
is cut by output rows into each layer's tensors (init_lycoris_rows: exact for LoHa and DoRA; a
LoKr only where its Kronecker blocks fall within each layer, refused naming why otherwise).
Diffusers-layout DoRA files: training/adapters/init_lora.py (their magnitudes as they are).

Why hand-written: no library maps LyCORIS factors back into peft's layers.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from lorastudio.errors import ConfigError, FieldProblem, ModelSourceError
from lorastudio.training.adapters.init_lora import outside_problems

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.generate.lycoris_names import Target

_SCALED = ("hada_w1_a", "lokr_w1", "lokr_w1_a")  # the factor that takes the scale, the first found


def file_targets(path: Path, pipeline_class: str) -> list[tuple[str, Target, dict[str, torch.Tensor]]]:
    """[(the file's layer name, the denoiser layers it patches, {LyCORIS suffix: tensor})] of a
    LoHa / LoKr / LyCORIS-layout DoRA file. Raises ModelSourceError naming the file: unreadable, a
    key no LyCORIS reader takes, one layer named twice."""
    from lorastudio.generate.lycoris_names import to_lycoris_names
    from lorastudio.lora.file_read import read_lora_file
    from lorastudio.lora.lycoris import group_modules

    tensors, _ = read_lora_file(path)
    try:
        modules = to_lycoris_names(group_modules(tensors), pipeline_class)
    except (ValueError, ConfigError, ModelSourceError) as err:  # LycorisError is a ValueError
        raise ModelSourceError(f"{path}: {err}") from err
    return [(name, target, parts) for name, (target, parts) in sorted(modules.items())]


def file_layers(path: Path, pipeline_class: str) -> dict[str, dict[str, torch.Tensor]]:
    """{`lycoris_<diffusers name>`: {LyCORIS suffix: tensor}} of every denoiser layer the file
    patches (a fused checkpoint layer's parts each with the whole layer's tensors: for the targets'
    check; the load cuts them, init_lycoris_rows). Raises ModelSourceError as `file_targets`."""
    return {key: parts for _, target, parts in file_targets(path, pipeline_class) for key in target.keys}


def layer_problems(
    cfg: TrainConfig, layers: dict[str, Any], name: str, targets: tuple[str, ...]
) -> list[FieldProblem]:
    """The file's layers no target of the run adapts (their flat LyCORIS names against the
    targets' suffixes, "." as "_"): their weights would be dropped."""
    from lorastudio.lora.lycoris import PREFIX

    wanted = sorted(set(cfg.lora_targets or targets))
    suffixes = ["_" + t.replace(".", "_") for t in wanted]
    outside = sorted(
        x for x in layers if not any(("_" + x.removeprefix(PREFIX)).endswith(s) for s in suffixes)
    )
    return outside_problems(name, outside, wanted)


def _rows(layer: Any) -> int:
    """The output rows of an adapted layer's base weight."""
    return int(layer.get_base_layer().weight.shape[0])


@torch.no_grad()
def load_init_lycoris(
    denoiser: Any, path: Path, pipeline_class: str
) -> tuple[int, tuple[str, ...], str | None]:
    """Put the LoHa / LoKr / LyCORIS-layout DoRA file `path` into `denoiser`'s freshly added
    adapter of the same kind (module docstring). Returns (layers loaded, the run's adapted layers
    the file lacks, the warning of a DoRA file whose header names no dora_scale rule or None:
    lora/dora_rule.py). Raises ModelSourceError for a layer the run does not adapt, a factor of
    another shape, a layer whose change the run's factorisation cannot hold, a fused layer
    whose parts no adapter of its kind holds apart (init_lycoris_rows), or a dora_scale rule
    the header names that is none of lora/dora_rule.RULES."""
    from lorastudio.lora.dora_rule import COMFYUI, DoraRule, dora_rule_of
    from lorastudio.lora.lycoris import LycorisError, module_key
    from lorastudio.training.adapters.init_lycoris_rows import split_rows
    from lorastudio.training.adapters.lora import module_scales

    by_key = {module_key(m): m for m in module_scales(denoiser)}  # lycoris_<flat> -> module name
    layers = dict(denoiser.named_modules())
    loaded = set()
    targets = file_targets(path, pipeline_class)
    dora = any("dora_scale" in parts for _, _, parts in targets)
    rule = dora_rule_of(path) if dora else DoraRule(COMFYUI, "no dora_scale")
    for name, target, parts in targets:
        modules = [by_key.get(key) for key in target.keys]
        if None in modules:
            raise ModelSourceError(
                f"init_lora {path}: the run has no adapter on its layer {target.keys[modules.index(None)]}"
            )
        pieces = [parts]
        if len(modules) > 1 or target.swapped:
            try:
                pieces = split_rows(parts, [_rows(layers[m]) for m in modules], target.swapped)
            except LycorisError as err:
                raise ModelSourceError(
                    f"init_lora {path}: its layer {name} patches {', '.join(modules)} at once (a fused checkpoint "
                    f"layer), and {err}"
                ) from err
        for module, piece in zip(modules, pieces, strict=True):
            if "lora_up.weight" in piece:
                _load_dora(layers[module], module, piece, path, rule.rule)
            else:
                _load_factors(layers[module], module, piece, path)
            loaded.add(module)
    return len(loaded), tuple(sorted(set(by_key.values()) - loaded)), rule.warning(path)


def _load_factors(layer: Any, module: str, parts: dict[str, torch.Tensor], path: Path) -> None:
    """One layer's LoHa / LoKr factors into the peft layer of the same kind, scaled to its change."""
    from lorastudio.lora.lycoris import comfy_delta
    from lorastudio.training.adapters.init_finite import refusal

    factors = {k: v for k, v in parts.items() if k != "alpha"}
    params = {}
    for suffix, value in factors.items():
        own = getattr(layer, suffix, None)
        param = own["default"] if own is not None and "default" in own else None
        if param is None or tuple(param.shape) != tuple(value.shape):
            raise ModelSourceError(
                f"init_lora {path}: its layer {module}'s {suffix} {list(value.shape)} fits no factor of the run's "
                "adapter (set lokr_factor / lokr_decompose_both / lora_rank as the run that wrote it)"
            )
        params[suffix] = param
    want = comfy_delta(parts).flatten()  # the file's change in this layer, ComfyUI's rule (float32)
    if not bool(torch.isfinite(want).all()):  # finite factors whose product is not (RELIABILITY 1680)
        what = (
            "(w1a @ w1b) * (w2a @ w2b) x alpha / rank"
            if "hada_w1_a" in factors
            else "kron(w1, w2) x alpha / rank"
        )
        raise ModelSourceError(refusal(path, module, what))
    for suffix, value in factors.items():
        params[suffix].copy_(value.to(params[suffix].device, torch.float32))
    have = layer.get_delta_weight("default").float().flatten().to(want.device)
    scaled = next(s for s in _SCALED if s in factors)
    ratio = float(want @ have) / max(float(have @ have), 1e-30)
    if not torch.allclose(have * ratio, want, rtol=1e-4, atol=1e-7 * max(1.0, float(want.abs().max()))):
        raise ModelSourceError(f"init_lora {path}: the run's adapter cannot hold its layer {module}'s change")
    getattr(layer, scaled)["default"].mul_(ratio)


def _load_dora(layer: Any, module: str, parts: dict[str, torch.Tensor], path: Path, rule: str) -> None:
    """One LyCORIS-layout DoRA layer (lora_up / lora_down / alpha / dora_scale) into peft's DoRA
    layer: A = down, B = up x the file's scale / the run's (the same change delta), and peft's
    magnitude per output row by the file's `rule` (lora/dora_rule.py): "lycoris" m = dora_scale
    (LyCORIS' (W + delta) dora_scale / ||W + delta|| is peft's m (W + delta) / ||W + delta||),
    "comfyui" m = dora_scale x ||W + delta|| / ||W||, so that peft's m (W + delta) / ||W + delta||
    is ComfyUI's (W + delta) dora_scale / ||W|| (lora/lycoris.py)."""
    from lorastudio.lora.dora_rule import LYCORIS

    up, down = (
        parts["lora_up.weight"].float(),
        parts["lora_down.weight"].float(),
    )  # [out, r, ...], [r, in, ...]
    scale = parts.get("dora_scale")
    own = getattr(layer, "lora_magnitude_vector", None)
    magnitude = own["default"].weight if own is not None and "default" in own else None
    a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    if magnitude is None or tuple(a.shape) != tuple(down.shape) or tuple(b.shape) != tuple(up.shape):
        raise ModelSourceError(
            f"init_lora {path}: its layer {module} is {list(down.shape)} / {list(up.shape)} (lora_down / lora_up), "
            f"the run's DoRA {list(a.shape)} / {list(b.shape)} (set lora_rank as the run that wrote it)"
        )
    rows = up.shape[0]
    if scale is None or scale.numel() != rows or scale.shape[0] != rows:
        shown = "none" if scale is None else str(list(scale.shape))
        raise ModelSourceError(
            f"init_lora {path}: its layer {module}'s dora_scale is {shown}, not one per output row ({rows}): "
            "peft's DoRA holds a magnitude per output row only (LyCORIS' wd_on_output)"
        )
    rank = down.shape[0]
    file_scale = float(parts["alpha"]) / rank if "alpha" in parts else 1.0  # ComfyUI: no alpha, scale 1
    run_scale = float(layer.scaling["default"])
    base = layer.get_base_layer().weight.detach().float()  # [out, in] or [out, in, k, k]
    flat = base.reshape(rows, -1).to(a.device)  # [out, in (x k x k)]
    delta = (up.reshape(rows, rank) @ down.reshape(rank, -1)).to(a.device) * file_scale  # [out, in (x k x k)]
    merged_norm = (flat + delta).norm(dim=1)  # [out]: ||W + delta||, inf where the change is past float32
    m = scale.float().reshape(rows).to(a.device)  # [out]: LyCORIS' rule, the magnitude itself
    if rule != LYCORIS:  # ComfyUI's: m = dora_scale ||W + delta|| / ||W||
        m = m * merged_norm / (flat.norm(dim=1) + torch.finfo(torch.float32).eps)  # [out]
    # finite values whose product is not (RELIABILITY 1542), by either rule
    if not bool(torch.isfinite(m).all() and torch.isfinite(merged_norm).all()):
        raise ModelSourceError(
            f"init_lora {path}: its layer {module}'s change (lora_up @ lora_down x alpha / rank) and magnitude "
            "are past what float32 holds (inf or NaN): the file is not a usable DoRA"
        )
    a.copy_(down.to(a.device))
    b.copy_((up * (file_scale / run_scale)).to(b.device))
    magnitude.copy_(m.reshape(magnitude.shape).to(magnitude.dtype))
