"""The family registry. A family is a declarative `FamilySpec` plus a few typed hooks
(`families.base.Family`). Adding a family = one module + one line in `_BUILTIN` below; the
contract suite in tests/families then tests it with no new test code.

Family modules are imported lazily, on first `get(name)`, so listing names stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from lorastudio.errors import UnknownFamily

if TYPE_CHECKING:
    from lorastudio.families.base import Family

# registry name -> "module:attribute" of the Family instance
_BUILTIN: dict[str, str] = {
    "sdxl": "lorastudio.families.sdxl:FAMILY",
    "flux": "lorastudio.families.flux:FAMILY",
    "qwen-image": "lorastudio.families.qwen_image:FAMILY",
    "z-image": "lorastudio.families.z_image:FAMILY",
    "flux2": "lorastudio.families.flux2:FAMILY",
    "flux2-klein": "lorastudio.families.flux2_klein:FAMILY",
    "flux-kontext": "lorastudio.families.flux_kontext:FAMILY",
    "qwen-image-edit": "lorastudio.families.qwen_image_edit:FAMILY",
    "chroma": "lorastudio.families.chroma:FAMILY",
    "krea2": "lorastudio.families.krea2:FAMILY",
}
_loaded: dict[str, Family] = {}


def register(family: Family) -> None:
    """Register (or replace) a family instance under `family.spec.name`."""
    _loaded[family.spec.name] = family
    _BUILTIN.setdefault(family.spec.name, "")


def names() -> list[str]:
    """Every registered family name, in registry order."""
    return list(_BUILTIN)


def get(name: str) -> Family:
    """The family registered as `name`. Raises UnknownFamily (listing valid names) otherwise."""
    if name in _loaded:
        return _loaded[name]
    target = _BUILTIN.get(name) if isinstance(name, str) else None
    if not target:
        raise UnknownFamily(str(name), names())
    module, attr = target.split(":")
    family = getattr(importlib.import_module(module), attr)
    _loaded[name] = family
    return family


def all_families() -> list[Family]:
    """Every registered family instance (imports them all)."""
    return [get(n) for n in names()]
