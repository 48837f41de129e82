"""A LoHa or LoKr file as a run's start (TrainConfig.init_lora with adapter "loha" / "lokr"):
the LyCORIS layout lorastudio writes for them (lora/lycoris.py: `lycoris_<diffusers name>`) and
the kohya-named LyCORIS files of other trainers (generate/lycoris_names.to_lycoris_names, the
names generation merges them under), put into the run's peft adapter.

Each file layer's factors are copied into the peft layer's parameters of the same names (peft and
LyCORIS share them: hada_w1_a ... / lokr_w1, lokr_w2_a ...; shapes must match: the run's
lokr_factor / lokr_decompose_both / rank as the run that wrote it), then one factor (hada_w1_a,
lokr_w1 or lokr_w1_a) is scaled so that peft's weight change (its get_delta_weight, at the run's
alpha / rank) equals ComfyUI's of the file (lora/lycoris.comfy_delta, its alpha rule) in that
layer; a layer whose changes are not proportional (another factorisation) is refused. A kohya
layer of several diffusers layers (FLUX.1's fused qkv) cannot be split into per-layer factors and
is refused. DoRA files: training/init_lora.py (the diffusers layout, its magnitudes as they are).

Why hand-written: no library maps LyCORIS factors back into peft's layers.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from lorastudio.errors import ConfigError, FieldProblem, ModelSourceError
from lorastudio.training.init_lora import listed, outside_problems

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig

_SCALED = ("hada_w1_a", "lokr_w1", "lokr_w1_a")  # the factor that takes the scale, the first found


def file_layers(path: Path, pipeline_class: str) -> dict[str, dict[str, torch.Tensor]]:
    """{`lycoris_<diffusers name>`: {LyCORIS suffix: tensor}} of a LoHa / LoKr file. Raises
    ModelSourceError naming the file: unreadable, a key no LyCORIS reader takes, a kohya layer of
    several diffusers layers."""
    from lorastudio.generate.lycoris_names import to_lycoris_names
    from lorastudio.lora.file_read import read_lora_file
    from lorastudio.lora.lycoris import group_modules

    tensors, _ = read_lora_file(path)
    try:
        modules = to_lycoris_names(group_modules(tensors), pipeline_class)
    except (ValueError, ConfigError, ModelSourceError) as err:  # LycorisError is a ValueError
        raise ModelSourceError(f"{path}: {err}") from err
    fused = sorted(x for x, (target, _) in modules.items() if len(target.keys) != 1 or target.swapped)
    if fused:
        raise ModelSourceError(
            f"{path}: its layers {listed(fused)} each patch several layers of the model (a fused checkpoint "
            "layer), which a run's LoHa / LoKr cannot hold apart"
        )
    return {target.keys[0]: parts for _, (target, parts) in modules.items()}


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


@torch.no_grad()
def load_init_lycoris(denoiser: Any, path: Path, pipeline_class: str) -> tuple[int, tuple[str, ...]]:
    """Put the LoHa / LoKr file `path` into `denoiser`'s freshly added adapter of the same kind
    (module docstring). Returns (layers loaded, the run's adapted layers the file lacks). Raises
    ModelSourceError for a layer the run does not adapt, a factor of another shape, or a layer
    whose change the run's factorisation cannot hold."""
    from lorastudio.lora.lycoris import comfy_delta, module_key
    from lorastudio.training.lora import module_scales

    by_key = {module_key(m): m for m in module_scales(denoiser)}  # lycoris_<flat> -> module name
    layers = dict(denoiser.named_modules())
    loaded = set()
    for key, parts in sorted(file_layers(path, pipeline_class).items()):
        module = by_key.get(key)
        if module is None:
            raise ModelSourceError(f"init_lora {path}: the run has no adapter on its layer {key}")
        layer = layers[module]
        factors = {k: v for k, v in parts.items() if k != "alpha"}
        for suffix, value in factors.items():
            own = getattr(layer, suffix, None)
            param = own["default"] if own is not None and "default" in own else None
            if param is None or tuple(param.shape) != tuple(value.shape):
                raise ModelSourceError(
                    f"init_lora {path}: its layer {module}'s {suffix} {list(value.shape)} fits no factor of the run's "
                    "adapter (set lokr_factor / lokr_decompose_both / lora_rank as the run that wrote it)"
                )
            param.copy_(value.to(param.device, torch.float32))
        want = comfy_delta(parts).flatten()  # the file's change in this layer, ComfyUI's rule
        have = layer.get_delta_weight("default").float().flatten().to(want.device)
        scaled = next(s for s in _SCALED if s in factors)
        ratio = float(want @ have) / max(float(have @ have), 1e-30)
        if not torch.allclose(have * ratio, want, rtol=1e-4, atol=1e-7 * max(1.0, float(want.abs().max()))):
            raise ModelSourceError(
                f"init_lora {path}: the run's adapter cannot hold its layer {module}'s change"
            )
        getattr(layer, scaled)["default"].mul_(ratio)
        loaded.add(module)
    return len(loaded), tuple(sorted(set(by_key.values()) - loaded))
