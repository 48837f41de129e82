"""OneTrainer's underscored module names (`lora_transformer_<diffusers name, "_" for ".">`, its
LoRAModuleWrapper's keys) -> the diffusers module name, for families whose names are diffusers'
own (Qwen-Image, Z-Image; FLUX.1's are read by names.flux_from_flat).

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

import torch

from lorastudio.errors import ConfigError, FieldProblem

# family -> (module, function) building its tiny denoiser from a seed (lorastudio.tiny)
_TINY_DENOISER = {
    "qwen-image": ("lorastudio.tiny.qwen_image", "qwen_image_transformer"),
    "z-image": ("lorastudio.tiny.z_image", "z_image_transformer"),
}
FAMILIES = frozenset(_TINY_DENOISER)
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


@functools.cache
def module_templates(family: str) -> tuple[tuple[str | None, ...], ...]:
    """The family's LoRA-able module names (Linear / Conv2d of its tiny denoiser on the meta
    device), split at the dots, a block list's index replaced by None (any index)."""
    module_name, function = _TINY_DENOISER[family]
    build = getattr(importlib.import_module(module_name), function)
    with torch.random.fork_rng(devices=[]), torch.device("meta"):  # the builder seeds torch's RNG
        model = build(0)
    lists = _block_lists(model)
    templates = set()
    for name, module in model.named_modules():
        if not isinstance(module, (torch.nn.Linear, torch.nn.Conv2d)):
            continue
        parts = name.split(".")
        templates.add(
            tuple(
                _ANY if part.isdigit() and ".".join(parts[:i]) in lists else part
                for i, part in enumerate(parts)
            )
        )
    return tuple(sorted(templates, key=lambda t: [p or "" for p in t]))


@functools.cache
def _patterns(family: str) -> tuple[tuple[re.Pattern[str], tuple[str | None, ...]], ...]:
    out = []
    for template in module_templates(family):
        regex = "_".join(_INDEX if part is _ANY else re.escape(part) for part in template)
        out.append((re.compile(regex), template))
    return tuple(out)


def from_flat(flat: str, family: str) -> str:
    """The diffusers module name of `family` whose underscored form is `flat` (module
    docstring). Raises ConfigError for none or several."""
    found = set()
    for pattern, template in _patterns(family):
        m = pattern.fullmatch(flat)
        if m is None:
            continue
        indices = iter(m.groups())
        found.add(".".join(next(indices) if part is _ANY else part for part in template))
    if len(found) == 1:
        return found.pop()
    why = "is no layer of" if not found else f"could be several layers ({', '.join(sorted(found))}) of"
    raise ConfigError([FieldProblem("lora", f"OneTrainer's layer {flat!r} {why} {family}'s transformer")])
