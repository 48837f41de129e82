"""How many control images each target of a paired dataset has, against what the family (or
the checkpoint's flavour) takes: the pairing's count problems (data/pairs.py) and the run's
preflight checks of a flavour's limits (training/preflight.py). No torch, no file access."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lorastudio.data.items import ImageItem
    from lorastudio.data.pairs import PairReport


def count_problems(report: PairReport, allowed: tuple[int, int], family: str) -> list[str]:
    """The control-count problems of a pairing for a family taking allowed = (min, max)."""
    low, high = allowed
    problems = [
        f"{orphan}: control image with no target of the same name (rename or remove it"
        + (
            f"; {report.case_twins[orphan]} differs only in case: names are matched exactly)"
            if orphan in report.case_twins
            else ")"
        )
        for orphan in report.orphans
    ]
    if high == 0:
        if report.controls:
            paired = ", ".join(sorted(report.controls)[:5])
            problems.append(
                f"{family} trains text-to-image only and takes no control images; found controls for "
                f"{len(report.controls)} image(s) ({paired}): use an edit family or remove them"
            )
        return problems
    if low > 0:
        problems += [
            f"{name}: no control image ({family} takes {low}-{high} per image; "
            "add control/<same name> or a control_files row)"
            for name in report.unpaired
        ]
    counts = {name: len(paths) for name, paths in report.controls.items()}
    problems += [
        f"{name}: {n} control images, {family} takes at most {high}" for name, n in counts.items() if n > high
    ]
    problems += [
        f"{name}: {n} control image(s), {family} takes at least {low}"
        for name, n in counts.items()
        if 0 < n < low
    ]
    return problems


def too_many_controls(items: Sequence[ImageItem], allowed: tuple[int, int], model: str) -> list[str]:
    """The items with more control images than `model` (a family flavour taking allowed =
    (min, max)) takes, each naming its files; [] when none has."""
    return [
        f"{item.path.name}: {len(item.controls)} control images ({', '.join(p.name for p in item.controls)}), "
        f"{model} takes at most {allowed[1]}"
        for item in items
        if len(item.controls) > allowed[1]
    ]


def missing_controls(items: Sequence[ImageItem], allowed: tuple[int, int], model: str) -> list[str]:
    """The items without a control image where `model` (a family flavour taking allowed =
    (min, max)) needs at least one, each named; [] when none lacks one (or min is 0)."""
    if allowed[0] == 0:
        return []
    return [
        f"{item.path.name}: no control image ({model} takes {allowed[0]}-{allowed[1]} per image; "
        "add control/<same name> or a control_files row)"
        for item in items
        if not item.controls
    ]
