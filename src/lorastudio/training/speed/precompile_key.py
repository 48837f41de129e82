"""The key of Dynamo's saved block graphs (training/speed/precompile.py): what a saved function's guards
cannot check, hashed; and the signature of a call's inputs, which names the file.

torch drops the guards on object identities (ID_MATCH / CLASS_MATCH / CLOSURE_MATCH /
FUNCTION_MATCH / DICT_VERSION: `CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES`)
from a saved function, so the key names the classes, hook functions and attention processors of
the block, the versions of the libraries whose code was traced, the device, the compile
settings and torch's compiler configuration. It must be the same in every process of the same
setup: sets are sorted (their order follows the string hash seed) and objects' addresses are
left out (RELIABILITY 1112).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import sys
from typing import Any

import torch

FORMAT = 1  # the saved files' format (training/speed/precompile.py); part of the key
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def local_classes(block: torch.nn.Module) -> list[str]:
    """The classes of `block`, its submodules and their attention processors that pickle cannot
    find by their module and qualified name (a class made at run time, such as block_swap's
    swapping subclass): Dynamo's saved guards refer to them by name, so their save would fail."""
    found = []
    for module in block.modules():
        for cls in (type(module), type(getattr(module, "processor", None))):
            if cls is not type(None) and not _found_by_name(cls):
                found.append(_qualified(cls))
    return sorted(set(found))


def local_instance_functions(block: torch.nn.Module) -> list[str]:
    """The functions set on an instance of `block` or its submodules (`module.forward = ...`)
    that pickle cannot find by their module and qualified name (a closure, a lambda). Dynamo's
    saved guards hold such a module, and pickle writes another function in their place (the
    class's, without the closure), so the saved file cannot load (RELIABILITY 1230). The
    compiled call that torch.compile sets on a module (`_compiled_call_impl`) is the outer
    wrapper, not traced."""
    found = []
    for module in block.modules():
        for attr, value in vars(module).items():
            fn = getattr(value, "__func__", value)
            if attr != "_compiled_call_impl" and inspect.isfunction(fn) and not _found_by_name(fn):
                found.append(f"{type(module).__name__}.{attr} ({fn.__qualname__})")
    return sorted(set(found))


def _found_by_name(obj: Any) -> bool:
    """Whether pickle finds `obj` (a class or function) by its module and qualified name."""
    target: Any = sys.modules.get(obj.__module__)
    for part in obj.__qualname__.split("."):
        target = getattr(target, part, None)
    return target is obj


def precompile_key(block: torch.nn.Module, settings: dict[str, Any]) -> str:
    """The key folder's name for `block`'s class under `settings` (see the module's doc)."""
    parts = {
        "format": FORMAT,
        "python": sys.version,
        "versions": _versions(),
        "settings": {k: repr(v) for k, v in sorted(settings.items())},
        "device": _device_name(block),
        "configs": _config_digest(),
        "sdpa": _sdpa_flags(),
        "structure": block_structure(block),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=repr).encode()).hexdigest()[:32]


def block_structure(block: torch.nn.Module) -> list[str]:
    """One line per submodule of `block`: its name, class, its hooks' functions and its attention
    processor's class (what the saved guards do not check by identity)."""
    lines = []
    for name, module in block.named_modules():
        hooks = [
            _qualified(h)
            for hooks in (
                module._forward_pre_hooks,
                module._forward_hooks,
                module._backward_hooks,
                module._backward_pre_hooks,
            )  # fmt: skip
            for h in hooks.values()
        ]
        processor = getattr(module, "processor", None)
        extra = f" processor={_qualified(type(processor))}" if processor is not None else ""
        lines.append(f"{name}: {_qualified(type(module))} hooks={hooks}{extra}")
    return lines


def _qualified(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__qualname__)}"


def _versions() -> dict[str, str]:
    import lorastudio

    found = {"torch": torch.__version__, "lorastudio": lorastudio.__version__}
    for name in ("diffusers", "peft", "transformers"):
        module = sys.modules.get(name)
        found[name] = str(getattr(module, "__version__", "-"))
    return found


def _device_name(block: torch.nn.Module) -> str:
    param = next(block.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    if device.type == "cuda":
        return f"cuda {torch.cuda.get_device_name(device)} {torch.version.cuda}"
    return device.type


def _config_digest() -> str:
    """A digest of Inductor's, AOTAutograd's and Dynamo's settings (what a compile depends on
    beyond its inputs; each module's `save_config_portable`, else its whole copy)."""
    import torch._dynamo.config as dynamo_config
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    digest = hashlib.sha256()
    for config in (inductor_config, functorch_config, dynamo_config):
        saver = getattr(config, "save_config_portable", None) or config.get_config_copy
        values = saver()
        for name in sorted(values):
            if "recompile_limit" in name:  # raised by compile.py per run's mode; no effect on a graph
                continue
            digest.update(f"{name}={_stable_repr(values[name])};".encode())
    return digest.hexdigest()


def _stable_repr(value: Any) -> str:
    """`repr(value)` the same in every process: sets sorted (their order follows the string hash
    seed), objects without their addresses."""
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(_stable_repr(v) for v in value)) + "}"
    if isinstance(value, dict):
        return (
            "{" + ", ".join(sorted(f"{_stable_repr(k)}: {_stable_repr(v)}" for k, v in value.items())) + "}"
        )
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_stable_repr(v) for v in value) + "]"
    return _ADDRESS.sub("", repr(value))


def _sdpa_flags() -> list[bool]:
    backends = torch.backends.cuda
    return [
        bool(f())
        for f in (
            backends.flash_sdp_enabled,
            backends.mem_efficient_sdp_enabled,
            backends.math_sdp_enabled,
            getattr(backends, "cudnn_sdp_enabled", lambda: False),
        )  # fmt: skip
    ]


def input_signature(args: tuple, kwargs: dict) -> str:
    """A digest of what the inputs' guards look at: each tensor's shape, strides, dtype, device
    and requires_grad, the other values' types and simple values, the grad mode."""
    parts: list[str] = [f"grad={torch.is_grad_enabled()}"]
    leaves, spec = torch.utils._pytree.tree_flatten((args, kwargs))
    parts.append(str(spec))
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            parts.append(
                f"T{tuple(leaf.shape)}{leaf.stride()}{leaf.dtype}{leaf.device.type}{leaf.requires_grad}"
            )
        elif leaf is None or isinstance(leaf, (bool, int, float, str)):
            parts.append(repr(leaf))
        else:
            parts.append(type(leaf).__qualname__)
    return hashlib.sha256("|".join(parts).encode()).hexdigest()
