"""The reference images of a run's sample prompts (config_samples.SamplePrompt.controls):
paths relative to the dataset folder, or inside one of the run's control_dirs folders (named by
the folder as control_dirs names it, or by its full path), checked with the dataset and opened
like its files; nothing outside those folders (RELIABILITY 1491).

Which references a prompt renders with: its `controls` when given ([] = none); left out, a
paired run's first paired image's controls (the edit a reader of the samples expects), a
text-to-image run's none. A family that needs references (spec.control_images min >= 1) gets
at least that many; no prompt gets more than the family takes. No torch here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lorastudio.config_datasets import top_resolution
from lorastudio.config_samples import SamplePrompt, prompt_controls
from lorastudio.data.control_sizing import ControlRule, ControlSizing, ControlTooSmall, control_size
from lorastudio.data.decode_slots import DEFAULT_DECODE_PIXELS
from lorastudio.data.images import probe_image
from lorastudio.data.items import DatasetScan
from lorastudio.data.safe_open import folder_identity
from lorastudio.errors import DatasetError
from lorastudio.user_paths import is_file, resolved


def default_references(scan: DatasetScan) -> tuple[Path, ...]:
    """The controls of the dataset's first paired image (() for a text-to-image dataset)."""
    return next((it.controls for it in scan.items if it.controls), ())


def sample_references(
    prompts: Sequence[str | SamplePrompt],
    scan: DatasetScan,
    allowed: tuple[int, int],
    *,
    family: str,
    max_pixels: int,
    decode_pixels: int = DEFAULT_DECODE_PIXELS,
    sizing: ControlSizing | None = None,
    rule: ControlRule = "target",
    control_names: Sequence[str] = (),
) -> tuple[list[tuple[Path, ...]], list[str]]:
    """Each sample prompt's reference image paths, and every problem found (naming the prompt
    and the file): a path outside the dataset folder and the run's control_dirs folders
    (`_reference_path`; `control_names`: the config's control_dirs as written, in the order of
    scan.control_dirs), missing or not a readable image, or one
    the run's control sizing (`sizing`: the family's pipeline rule, `rule`: control_resolution;
    a preview sizes its references as training sizes controls, training/samples.py) cannot size
    (ControlTooSmall); more references than the family takes (`allowed` = spec.control_images),
    fewer than it needs, or any for a text-to-image family. The paths are usable only when the
    problems are empty."""
    low, high = allowed
    default = default_references(scan)
    found: list[tuple[Path, ...]] = []
    problems: list[str] = []
    for i, entry in enumerate(prompts):
        asked = prompt_controls(entry)
        where = f"sample prompt {i}"
        if asked is None:
            found.append(default[:high])
            continue
        paths: list[Path] = []
        for name in asked:
            path, problem = _reference_path(name, scan, control_names)
            if path is None:
                problems.append(f"{where}: {problem}")
                continue
            try:
                info = probe_image(path, max_pixels, decode_pixels, folder_identity(path.parent))
                control_size(sizing, rule, info.width, info.height)
            except DatasetError as err:
                problems += [f"{where}: control {p}" for p in err.problems]
                continue
            except ControlTooSmall as err:
                problems.append(f"{where}: control {name}: {err}")
                continue
            paths.append(path)
        if high == 0 and asked:
            problems.append(f"{where}: {family} takes no reference images (a text-to-image family)")
        elif len(asked) > high:
            problems.append(f"{where}: {len(asked)} control images, {family} takes at most {high}")
        elif len(asked) < low:
            problems.append(f"{where}: {len(asked)} control image(s), {family} needs at least {low}")
        found.append(tuple(paths))
    return found, problems


def _reference_path(name: str, scan: DatasetScan, control_names: Sequence[str]) -> tuple[Path | None, str]:
    """Where a prompt's control `name` is, or (None, why): a relative path inside the dataset
    folder (scan.root) when that file is there; else a path inside one of the run's control_dirs
    folders (scan.control_dirs), named by the folder as control_dirs names it (`control_names`,
    e.g. "aitk-controls/a.png") or by its full path (as the preflight names such a control).
    Never outside those folders: no "..", and a link whose real path leaves its folder is refused."""
    rel = Path(name)
    if not name.strip() or ".." in rel.parts:
        return None, f"control {name!r} must be a path inside the dataset folder or a control_dirs folder"
    if not rel.is_absolute() and is_file(scan.root / rel):
        return _confined(scan.root / rel, scan.root, name, "the dataset folder")
    dirs = scan.control_dirs
    names = list(control_names) if len(control_names) == len(dirs) else [""] * len(dirs)
    for folder, given in zip(dirs, names, strict=True):
        for prefix in dict.fromkeys(p for p in (Path(given) if given else None, folder) if p is not None):
            if rel != prefix and rel.is_relative_to(prefix):
                return _confined(
                    folder / rel.relative_to(prefix), folder, name, f"the control_dirs folder {folder}"
                )
    if rel.is_absolute():
        return None, f"control {name!r} must be a path inside the dataset folder or a control_dirs folder"
    return _confined(scan.root / rel, scan.root, name, "the dataset folder")


def _confined(path: Path, folder: Path, name: str, label: str) -> tuple[Path | None, str]:
    """`path` (named `name`) when it is a file whose real path stays inside `folder`, else (None, why)."""
    real, root = resolved(path), resolved(folder)
    if real is None or root is None:  # a link loop, a NUL byte, a name over the system's limits
        return None, (
            f"control {name!r} cannot be followed to a file (a link loop, a NUL character or a name"
            " longer than the file system allows)"
        )
    if not real.is_relative_to(root):
        return None, f"control {name} is a link out of {label}"
    if not is_file(path):
        where = f"{folder.name}/" if label == "the dataset folder" else str(folder)
        return None, f"control image {name} not found in {where}"
    return path, ""


def sample_size(prompt: str | SamplePrompt, resolution: int | list[int] | None) -> tuple[int, int]:
    """(width, height) a sample prompt renders at: its own width / height, else the (largest)
    training resolution (a run of several resolutions samples at the largest)."""
    side = top_resolution(resolution)
    if isinstance(prompt, SamplePrompt):
        return prompt.width or side, prompt.height or side
    return side, side


def reference_size_problems(
    prompts: Sequence[str | SamplePrompt],
    paths: Sequence[tuple[Path, ...]],
    resolution: int | list[int] | None,
    family: str,
    min_side: int,
) -> list[str]:
    """The sample prompts whose references (`paths`: sample_references' for each prompt) the
    family's pipeline refuses at the size the prompt renders at (`sample_size`: its own, else the
    training resolution), one problem each: the one rule of a run's checks (jobs/validation.py) and
    the engine's preflight (training/preflight.py), so that no sample round fails on it mid-run."""
    out = []
    for i, (prompt, refs) in enumerate(zip(prompts, paths, strict=True)):
        width, height = sample_size(prompt, resolution)
        small = reference_size_problem(family, min_side, width, height) if refs else None
        if small is None:
            continue
        own = isinstance(prompt, SamplePrompt) and (prompt.width or prompt.height)
        where = (
            f"sample prompt {i} at {width}x{height}"
            if own
            else f"samples with references at resolution {width}"
        )
        out.append(f"{where}: {small}")
    return list(dict.fromkeys(out))


def reference_size_problem(family: str, min_side: int, width: int, height: int) -> str | None:
    """Why references cannot be rendered at width x height (a reference is fitted to the output
    size, and the family's pipeline refuses one under `min_side` pixels), or None."""
    if min_side and min(width, height) < min_side:
        return f"{family} takes reference images of at least {min_side} px a side: render at {min_side} px or more"
    return None
