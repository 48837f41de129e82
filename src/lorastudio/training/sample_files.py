"""Sample preview files of a run: names, writing (staged, then renamed) and listing. No torch
here: the API lists and serves the files with these functions.

Layout: <run_dir>/samples/step-000123-0.png, one PNG per (optimizer step, sample prompt index);
ref-<prompt index>-<slot>.png, a copy of each reference image a prompt is rendered with (an
edit family's samples: the gallery shows them beside the samples, whatever the dataset becomes).
A file of that name is always complete: it is written under a hidden staging name in the same
folder and renamed into place. The names are training/resume/run_files.py's (what a run writes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from lorastudio.folder_entries import entries
from lorastudio.training.resume.folder_guard import check_folder, replace_in_run
from lorastudio.training.resume.run_files import (
    SAMPLES,
    parse_reference_name,
    parse_sample_name,
    reference_name,
    sample_name,
    staging_path,
)


def list_references(run_dir: Path) -> dict[int, list[str]]:
    """Sample prompt index -> the names of its reference copies in slot order (regular files
    only; prompts without references absent)."""
    folder = samples_dir(run_dir)
    if not folder.is_dir() or folder.is_symlink():
        return {}
    found: dict[int, list[tuple[int, str]]] = {}
    for path in entries(folder):  # gone since the check (a run delete): none
        parsed = parse_reference_name(path.name)
        if parsed is not None and path.is_file() and not path.is_symlink():
            found.setdefault(parsed[0], []).append((parsed[1], path.name))
    return {i: [name for _, name in sorted(names)] for i, names in sorted(found.items())}


def samples_dir(run_dir: Path) -> Path:
    """The samples folder of a run folder."""
    return run_dir / SAMPLES


@dataclass(frozen=True)
class SampleFile:
    """One sample image of a run: its step, prompt index, name and path relative to the run."""

    step: int
    index: int
    name: str

    @property
    def relative(self) -> str:
        return f"{SAMPLES}/{self.name}"


def list_samples(run_dir: Path) -> list[SampleFile]:
    """The complete sample files of `run_dir` (regular files with a sample name), ordered by
    step, then prompt index. Staging leftovers, symlinks and other files are ignored."""
    folder = samples_dir(run_dir)
    if not folder.is_dir() or folder.is_symlink():
        return []
    found = []
    for path in entries(folder):  # gone since the check (a run delete): none
        parsed = parse_sample_name(path.name)
        if parsed is not None and path.is_file() and not path.is_symlink():
            found.append(SampleFile(parsed[0], parsed[1], path.name))
    return sorted(found, key=lambda f: (f.step, f.index))


def sample_path(run_dir: Path, name: str) -> Path | None:
    """The path of the sample file `name` of `run_dir`, or None when `name` is not a sample
    name or no such regular file (symlinks excluded) lies directly in the run's samples folder.
    `name` cannot escape the folder: only names matching step-NNNNNN-I.png (and the reference
    copies' ref-I-S.png) are accepted."""
    if parse_sample_name(name) is None and parse_reference_name(name) is None:
        return None
    folder = samples_dir(run_dir)
    path = folder / name
    if folder.is_symlink() or path.is_symlink() or not path.is_file():
        return None
    return path


def write_reference_files(
    run_dir: Path, writers: dict[tuple[int, int], Callable[[Path], None]]
) -> list[Path]:
    """Write the reference copies: writers[(index, slot)](staging_path) writes the PNG of slot
    `slot` of prompt `index`; staged, then renamed as write_sample_files does. Returns the paths."""
    keys = list(writers)
    names = [reference_name(i, slot) for i, slot in keys]
    return _write_staged(samples_dir(run_dir), [writers[k] for k in keys], names)


def write_sample_files(
    run_dir: Path, step: int, writers: Sequence[Callable[[Path], None] | None]
) -> list[Path]:
    """Write the samples of `step`: writers[i](staging_path) writes the PNG of prompt i; a None
    writer writes no file for prompt i (its image was not finite: training/samples.py). Every
    file is first written under a staging name; once all are written they are renamed into
    place (replacing older files of the same name). Returns the final paths in prompt order.
    On failure no staging file is left behind (and no file of this round is renamed)."""
    kept = [(i, write) for i, write in enumerate(writers) if write is not None]
    names = [sample_name(step, i) for i, _ in kept]
    return _write_staged(samples_dir(run_dir), [write for _, write in kept], names)


def _write_staged(folder: Path, writers: list[Callable[[Path], None]], names: list[str]) -> list[Path]:
    """Each writer writes a staging file in `folder`; once all are written, they are renamed to
    `names` (in order). No staging file is left behind on failure."""
    check_folder(folder.parent)  # a folder put at the run's path since it started takes nothing
    folder.mkdir(exist_ok=True)
    check_folder(folder)
    staged: list[Path] = []
    try:
        for write in writers:
            staging = staging_path(folder, ".png")
            staged.append(staging)
            write(staging)
        finals = [folder / name for name in names]
        check_folder(folder)  # the staged files are in the run's folder: so are the renamed ones
        for staging, final in zip(staged, finals, strict=True):
            replace_in_run(staging, final)
        return finals
    finally:
        for staging in staged:
            staging.unlink(missing_ok=True)


def remove_samples(paths: list[Path]) -> None:
    """Remove the given sample files (missing ones are skipped) and the samples folder if it is
    left empty."""
    folders = set()
    for path in paths:
        check_folder(path.parent)  # another's folder at the run's path: nothing of it goes
        path.unlink(missing_ok=True)
        folders.add(path.parent)
    for folder in folders:
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
