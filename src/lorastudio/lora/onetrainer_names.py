"""OneTrainer's underscored module names (`lora_transformer_<diffusers name, "_" for ".">`, its
LoRAModuleWrapper's keys) -> the diffusers module name, for families whose names are diffusers'
own (Qwen-Image, Z-Image; FLUX.1's are read by names.flux_from_flat), and SDXL's U-Net
(`lora_unet_<diffusers name>`, what OneTrainer's SDXL saver writes beside kohya's SGM names).
The same matching resolves the text encoders' names (lora/text_encoder_names.py: templates_of,
match_flat, match_dotted on transformers' CLIP / T5 classes).

The underscored form is ambiguous by itself (`transformer_blocks_0_attn_add_q_proj`: is it
`attn.add_q_proj` or `attn.add.q.proj`?), so it is never re-dotted by a rule: it is matched against
the real module names of the family's tiny denoiser built on the meta device (no weights, no
memory), the Linear / Conv2d layers a LoRA can sit on. The index of a block list (a ModuleList
of one block class with layers of its own: `transformer_blocks.N`, `layers.N`,
`noise_refiner.N`) stands for any index, as a real checkpoint has more blocks than the tiny one;
every other part of a name must match whole. An index is ASCII digits without a leading zero
(as nn.ModuleList names its children).

Contract: `from_flat(flat, family)` answers the one module name whose underscored form is `flat`;
ConfigError when none is (a layer of no module of the family) or more than one would be.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable

import torch

from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.lora import names

# family -> (module, function) building its tiny denoiser from a seed (lorastudio.tiny)
_TINY_DENOISER = {
    "qwen-image": ("lorastudio.tiny.qwen_image", "qwen_image_transformer"),
    "z-image": ("lorastudio.tiny.z_image", "z_image_transformer"),
    "sdxl": ("lorastudio.tiny.models", "sdxl_unet"),  # OneTrainer's `lora_unet_<diffusers name>`
}
# the families whose OneTrainer files carry `lora_transformer_` keys read by from_flat (SDXL's
# `lora_unet_<diffusers name>` keys are read by lora/convert_read.py beside kohya's SGM names)
FAMILIES = frozenset({"qwen-image", "z-image"})
Template = tuple[str | None, ...]
_ANY = None  # a template part standing for any block index
# a block index as a module name spells it: ASCII digits, no leading zero (re's \d also takes
# "٣" or "३", and "007" is no module: either would name a layer no model has)
_INDEX = r"(0|[1-9][0-9]*)"


def _block_lists(model: torch.nn.Module) -> set[str]:
    """Names of the model's block lists: a ModuleList / Sequential whose children are all of one
    class that has layers of its own (not `to_out` = [Linear, Dropout], not `mlp` = [Linear, ...])."""
    found = set()
    for name, module in model.named_modules():
        if not isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential)) or not len(module):
            continue
        kinds = {type(child) for child in module}
        if len(kinds) == 1 and any(True for _ in next(iter(module)).children()):
            found.add(name)
    return found


def templates_of(model: torch.nn.Module, rename: Callable[[str], str] = str) -> tuple[Template, ...]:
    """The LoRA-able module names (Linear / Conv2d) of `model`, each `rename`d (a file's spelling
    of it) and split at the dots, a block list's index replaced by None (any index)."""
    lists = _block_lists(model)
    templates = set()
    for name, module in model.named_modules():
        if not isinstance(module, (torch.nn.Linear, torch.nn.Conv2d)):
            continue
        parts = name.split(".")
        anys = {i for i, part in enumerate(parts) if part.isdigit() and ".".join(parts[:i]) in lists}
        renamed = rename(name).split(".")
        shift = len(renamed) - len(parts)  # a prefix rename (CLIP's `text_model.`) moves the parts
        templates.add(tuple(_ANY if i - shift in anys else part for i, part in enumerate(renamed)))
    return tuple(sorted(templates, key=lambda t: [p or "" for p in t]))


@functools.cache
def module_templates(family: str) -> tuple[Template, ...]:
    """The family's LoRA-able module names (templates_of its tiny denoiser on the meta device)."""
    module_name, function = _TINY_DENOISER[family]
    build = getattr(importlib.import_module(module_name), function)
    with torch.random.fork_rng(devices=[]), torch.device("meta"):  # the builder seeds torch's RNG
        model = build(0)
    return templates_of(model)


@functools.cache
def _compiled(templates: tuple[Template, ...]) -> tuple[tuple[re.Pattern[str], Template], ...]:
    out = []
    for template in templates:
        regex = "_".join(_INDEX if part is _ANY else re.escape(part) for part in template)
        out.append((re.compile(regex), template))
    return tuple(out)


def match_flat(flat: str, templates: tuple[Template, ...]) -> set[str]:
    """The dotted module names of `templates` whose underscored form is `flat` (none, one or
    several: the underscored form is ambiguous by itself)."""
    found = set()
    for pattern, template in _compiled(templates):
        m = pattern.fullmatch(flat)
        if m is None:
            continue
        indices = iter(m.groups())
        found.add(".".join(next(indices) if part is _ANY else part for part in template))
    return found


def match_dotted(name: str, templates: tuple[Template, ...]) -> bool:
    """Whether the dotted module name `name` is one of `templates` (an index as a ModuleList
    names its children: ASCII digits without a leading zero)."""
    parts = name.split(".")
    return any(
        len(t) == len(parts)
        and all(
            p == q if p is not _ANY else re.fullmatch(_INDEX, q) is not None
            for p, q in zip(t, parts, strict=True)
        )
        for t in templates
    )


def from_flat(flat: str, family: str) -> str:
    """The diffusers module name of `family` whose underscored form is `flat` (module
    docstring). Raises ConfigError for none or several."""
    found = match_flat(flat, module_templates(family))
    if len(found) == 1:
        return found.pop()
    why = "is no layer of" if not found else f"could be several layers ({', '.join(sorted(found))}) of"
    denoiser = "U-Net" if family == "sdxl" else "transformer"
    raise ConfigError([FieldProblem("lora", f"OneTrainer's layer {flat!r} {why} {family}'s {denoiser}")])


def sdxl_layer(flat: str) -> tuple[str, bool]:
    """(module, whether it is a diffusers name) of an SDXL `lora_unet_<flat>` layer: kohya's SGM
    name (`input_blocks_4_1_proj_in`), else OneTrainer's (and kohya's SD-1.x-style) diffusers name
    (`down_blocks_1_attentions_0_proj_in`, which ComfyUI's SDXL map reads too), resolved against
    the real U-Net's module names (from_flat). Raises ConfigError for neither."""
    native = names.undot(flat, "sdxl")
    try:
        names.sdxl_from_original(native)
        return native, False
    except ConfigError:
        pass
    try:
        return from_flat(flat, "sdxl"), True
    except ConfigError:
        raise ConfigError(
            [
                FieldProblem(
                    "lora",
                    f"lora_unet_{flat} is no layer of SDXL's U-Net (neither an SGM name, input_blocks_4_1_…,"
                    " nor a diffusers one, down_blocks_1_attentions_0_…)",
                )
            ]
        ) from None
