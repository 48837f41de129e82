"""The sides the family tests use (tests/families/): their tensors' RES and the config's."""

from __future__ import annotations

from lorastudio import families

RES = 32  # the tensors' side: the tiny models' smallest


def config_side(family: str) -> int:
    """The config's resolution: RES, or the least the family's rules take (SDXL: 64, fix 1390);
    the tensors stay RES a side, the config only names the run."""
    return max(RES, 2 * families.get(family).spec.resolution_multiple)
