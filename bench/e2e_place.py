"""Where an e2e build goes (bench/e2e_build.py): the pipeline folder and the studio home, chosen by
free space before anything is written, so that a real-size build never fills a disk.

On the GPU machine the disk (64 GiB) also holds the wheels, the venv and the caches, and
Qwen-Image's folder is ~58 GB: it may not fit there, while /dev/shm (RAM-backed tmpfs) may.
A folder in /dev/shm takes its size from host RAM, so /dev/shm is chosen only when the run's
host RAM forecast still fits beside it:

    need      = the pipeline's bf16 bytes (the built modules' parameters and buffers) + MARGIN_GB
    run_gb    = the run's peak host RAM on CUDA, as lorastudio.jobs.host_memory forecasts it:
                CUDA_PROCESS_GB twice (the API mode's server + worker), plus the largest
                component's weights as a margin (the forecast no longer counts weights stored in
                the dtype they load in: RESULTS note 34; the bench keeps the older, safer sum)
    pipeline  /dev/shm when shm_free >= need and ram_free - need >= run_gb + MARGIN_GB
              (prefer="auto" or "shm"), else the disk when disk_free >= need (auto or "disk")
    home      the disk under DIR when it has HOME_GB left beside the pipeline, else /dev/shm
              when RAM allows it too (the home holds Inductor's and the probe's caches, the
              dataset, the outputs: LoRA checkpoints and samples)
    neither   NoSpaceLeft naming what is needed and what is free where: nothing is written

A place other than DIR is linked from DIR (DIR/<family>, DIR/home are symlinks), so the layout of
e2e_build.pipeline_dir / home_dir holds for every later call on the same machine.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from lorastudio.errors import NoSpaceLeft
from lorastudio.jobs.host_memory import CUDA_PROCESS_GB, available_host_bytes

SHM = Path("/dev/shm")
SHM_DIR = "lorastudio-e2e"  # the bench's folder in /dev/shm
MARGIN_GB = 3.0  # kept free on any filesystem and in RAM
HOME_GB = 8.0  # the studio home of a real-size suite: caches, dataset, checkpoints, samples
PLACES = ("auto", "shm", "disk")


@dataclass(frozen=True)
class Placement:
    """The chosen folders: `pipeline` is where the pipeline's files are written, `home` the
    studio home; `where` says "shm" / "disk" for each; `figures` the GB it was decided on."""

    pipeline: Path
    home: Path
    where: dict[str, str]
    figures: dict[str, float | None]


def free_gb(path: Path) -> float | None:
    """Free GB (10^9) of the filesystem holding `path` (its nearest existing parent); None when
    there is none (no /dev/shm)."""
    for p in (path, *path.parents):
        if p.exists():
            return shutil.disk_usage(p).free / 1e9
    return None


def ram_free_gb() -> float | None:
    available = available_host_bytes()
    return None if available is None else available / 1e9


def run_host_gb(component_gb: dict[str, float]) -> float:
    """The run's host RAM forecast on CUDA (module docstring), from each component's GB."""
    return 2 * CUDA_PROCESS_GB + max(component_gb.values(), default=0.0)


def choose(
    need_gb: float,
    run_gb: float,
    disk_free: float | None,
    shm_free: float | None,
    ram_free: float | None,
    prefer: str = "auto",
    home_gb: float = HOME_GB,
) -> dict[str, str]:
    """{"pipeline": "shm"|"disk", "home": "shm"|"disk"} for a folder of `need_gb` (module
    docstring's rule). Raises NoSpaceLeft with needed vs free everywhere when nothing fits."""
    if prefer not in PLACES:
        raise ValueError(f"place must be one of {PLACES}, not {prefer!r}")
    disk = disk_free or 0.0

    def shm_holds(gb: float) -> bool:
        room = shm_free is not None and shm_free >= gb + MARGIN_GB
        return room and (ram_free is None or ram_free - gb >= run_gb + MARGIN_GB)

    order = {"auto": ("shm", "disk"), "shm": ("shm",), "disk": ("disk",)}[prefer]
    for place in order:
        if place == "shm" and shm_holds(need_gb):
            home = "disk" if disk >= home_gb + MARGIN_GB else "shm" if shm_holds(need_gb + home_gb) else None
        elif place == "disk" and disk >= need_gb + MARGIN_GB:
            home = "disk" if disk >= need_gb + home_gb + MARGIN_GB else "shm" if shm_holds(home_gb) else None
        else:
            continue
        if home:
            return {"pipeline": place, "home": home}
    shm = "none" if shm_free is None else f"{shm_free:.1f} GB"
    ram = "unknown" if ram_free is None else f"{ram_free:.1f} GB"
    raise NoSpaceLeft(
        f"the pipeline needs {need_gb:.1f} GB + {MARGIN_GB:.0f} GB margin and its studio home"
        f" {home_gb:.1f} GB (place {prefer}); free: disk {disk:.1f} GB, /dev/shm {shm}, host RAM {ram}"
        f" of which the run needs {run_gb:.1f} GB beside anything in /dev/shm; nothing was written"
    )


def place(
    root: Path,
    family: str,
    need_gb: float,
    run_gb: float,
    prefer: str = "auto",
    home_gb: float = HOME_GB,
    shm: Path | None = None,
) -> Placement:
    """Measure the free space (root's filesystem, `shm` (default SHM), host RAM) and choose (see
    `choose`): the folders the pipeline and the home go to. Raises NoSpaceLeft when nothing fits."""
    shm = SHM if shm is None else shm
    figures = {
        "need_gb": round(need_gb, 2),
        "run_host_gb": round(run_gb, 2),
        "disk_free_gb": _round(free_gb(root)),
        "shm_free_gb": _round(free_gb(shm) if shm.is_dir() else None),
        "ram_free_gb": _round(ram_free_gb()),
    }
    where = choose(
        need_gb,
        run_gb,
        figures["disk_free_gb"],
        figures["shm_free_gb"],
        figures["ram_free_gb"],
        prefer,
        home_gb,
    )
    base = {"disk": root, "shm": shm / SHM_DIR}
    return Placement(base[where["pipeline"]] / family, base[where["home"]] / "home", where, figures)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def link(target: Path, at: Path) -> None:
    """Make `at` name `target`: nothing when they are the same path, else a symlink (an old link at
    `at` is replaced; a real folder there is left alone and raises FileExistsError)."""
    if at.absolute() == target.absolute():
        return
    if at.is_symlink():
        at.unlink()
    at.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, at, target_is_directory=True)


def usage(paths: dict[str, Path]) -> dict[str, dict[str, float] | float | None]:
    """`df` of each named path (total / used / free GB of its filesystem) and host RAM available:
    what the suite prints before and after each part."""
    out: dict[str, dict[str, float] | float | None] = {}
    for name, path in paths.items():
        existing = next((p for p in (path, *path.parents) if p.exists()), None)
        if existing is None:
            out[name] = None
            continue
        total, used, free = shutil.disk_usage(existing)
        out[name] = {
            "total_gb": round(total / 1e9, 1),
            "used_gb": round(used / 1e9, 1),
            "free_gb": round(free / 1e9, 1),
        }
    out["ram_available_gb"] = _round(ram_free_gb())
    return out
