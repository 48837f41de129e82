"""The checks `lorastudio generate` (cli/generate_cmd.py) makes before any work, as POST
/api/generate makes them: the request's size, steps and --control count against the family, the
base's flavour and the API's budget (`request_problems`), and the --control images read and checked
like dataset images (`read_controls`). Each adds to the command's list of problems, so every one is
told at once. Split from cli/generate_cmd.py to keep it short; no torch at import.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lorastudio.errors import FieldProblem
from lorastudio.user_paths import missing_file


def request_problems(
    family: str, found: Any, controls: int, width: int | None, height: int | None, steps: int | None
) -> list[FieldProblem]:
    """The checks POST /api/generate makes before any work: --width / --height multiples of the
    family's and --width / --height / --steps within the API's budget
    (generation_rules.budget_problems, the same words), the --control count
    against the family and the base checkpoint's flavour (jobs.references.reference_count_problems)
    and the references' smallest side (data.sample_refs.reference_size_problem). `found`: the
    resolved base (None if unresolved)."""
    from lorastudio import families
    from lorastudio.data.sample_refs import reference_size_problem
    from lorastudio.generation_rules import budget_problems
    from lorastudio.jobs.references import reference_count_problems

    fam = families.get(family)
    spec = fam.spec
    side = spec.generation_side
    width, height = side if width is None else width, side if height is None else height
    problems = budget_problems(width, height, steps, spec.name, "--")
    configs = found.configs if found is not None else None
    folder = Path(configs).expanduser() if isinstance(configs, (str, Path)) else None
    flavour = fam.folder_variant(folder) if folder is not None and folder.is_dir() else None
    # none: text-to-image, which each flavour taking 0 renders (Family.render_without_references);
    # one that needs a reference (single-image Qwen-Image-Edit) is refused here, before its load
    problems += reference_count_problems(spec.name, controls, flavour, field="--control")
    small = reference_size_problem(spec.name, spec.min_reference_side, width, height)
    if controls and small:
        problems.append(FieldProblem("--control", small))
    return problems


def read_controls(paths: list[Path], problems: list[FieldProblem]) -> list:
    """The --control images, decoded and checked like dataset images (data.images); a missing or
    unreadable file is added to `problems`."""
    from lorastudio.data.images import load_rgb, probe_image
    from lorastudio.errors import DatasetError
    from lorastudio.settings import get_settings

    images = []
    for path in paths:
        if not path.is_file():
            problems.append(FieldProblem("--control", missing_file(path)))
            continue
        try:
            probe_image(path, get_settings().max_image_pixels)
            images.append(load_rgb(path))
        except DatasetError as err:
            problems.append(FieldProblem("--control", "; ".join(err.problems)))
    return images
