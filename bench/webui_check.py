"""Do Forge's, A1111's and LyCORIS' own LoRA loaders load lorastudio's SDXL and FLUX.1 files at the
trained strength?

    python -m bench.webui_check [--loader forge|a1111|lycoris ...] [--case CASE ...] [FAMILY ...]

The other loaders users load LoRA / LyCORIS files with, beside ComfyUI's (bench/comfyui_check.py,
whose tiny runs and case folders this reuses: `write_case`, the trained change by peft's own
merge): for each family (sdxl, flux) x case x loader, bench/webui_side.py runs the loader's own
code in a process of its own (nothing of lorastudio imported there) and every changed weight must
equal the trained change within the case's tolerance, every layer of the file matched.

Neither WebUI is on PyPI and neither is vendored: give their trees.
- LORASTUDIO_FORGE: a tree of lllyasviel/stable-diffusion-webui-forge (its `backend/patcher`,
  `backend/utils.py` and `packages_3rdparty` are what runs; checked with dfdcbab6, 2025-06-26,
  the `fetch` snapshot: `git archive HEAD backend/patcher backend/utils.py packages_3rdparty`).
- LORASTUDIO_A1111: a tree holding AUTOMATIC1111/stable-diffusion-webui's `extensions-builtin/Lora`
  (its own snapshot is over the `fetch` limit; Forge's history holds A1111's commits up to its
  fork: `git archive 358e9e28 extensions-builtin/Lora` of the Forge mirror, A1111's dev branch of
  2024-01-23, v1.8.0-RC: no DoRA reader yet). SDXL only (A1111 has no FLUX.1 model).
- LORASTUDIO_LYCORIS: a folder on the side's PYTHONPATH holding lycoris-lora (checked with 4.1.3)
  and einops (`pip install --no-deps --target DIR lycoris-lora einops toml`; A1111's network_oft
  needs einops too).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.comfyui_check import CASES, write_case

SIDE = Path(__file__).with_name("webui_side.py")
FAMILIES = ("sdxl", "flux")
LOADERS = ("forge", "a1111", "lycoris")
# a factor whose square exceeds the tiny layers' widths (RELIABILITY's Known problem "LoKr factor
# order"): peft's (f, d / f) order, not LyCORIS' (d / f, f)
CASES.setdefault("lokr-f8", {"adapter": "lokr", "lokr_factor": 8})
FORGE = Path(os.environ.get("LORASTUDIO_FORGE", "/nonexistent"))
A1111 = Path(os.environ.get("LORASTUDIO_A1111", "/nonexistent"))
LYCORIS = os.environ.get("LORASTUDIO_LYCORIS")


def available(loader: str) -> str | None:
    """None when `loader`'s code is at hand, else why not."""
    if not (FORGE / "backend" / "patcher" / "lora.py").is_file():
        return "no Forge tree (LORASTUDIO_FORGE): its name tables are used by every loader here"
    if loader == "a1111" and not (A1111 / "extensions-builtin" / "Lora" / "networks.py").is_file():
        return "no A1111 tree (LORASTUDIO_A1111)"
    if loader in ("lycoris", "a1111") and not (LYCORIS and Path(LYCORIS, "lycoris").is_dir()):
        return "no LyCORIS / einops folder (LORASTUDIO_LYCORIS)"
    return None


def run_side(folder: Path, loader: str) -> dict[str, Any]:
    """webui_side.py's result for the case `folder` with `loader`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if LYCORIS:
        env["PYTHONPATH"] = LYCORIS
    root = {"forge": FORGE, "a1111": A1111, "lycoris": FORGE}[loader]
    run = subprocess.run(
        [
            sys.executable,
            str(SIDE),
            "--loader",
            loader,
            "--root",
            str(root),
            "--forge-root",
            str(FORGE),
            str(folder),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    if run.returncode != 0 or not lines:
        return {"loader": loader, "ok": False, "error": (run.stderr or run.stdout)[-2000:]}
    return json.loads(lines[-1])


def check(
    family: str, case: str, loaders: list[str], work: Path, lora_format: str | None = None
) -> list[dict[str, Any]]:
    """Train one family's `case` (3 tiny CPU steps) and run each loader on its file."""
    folder = write_case(family, work, case, lora_format)
    return [run_side(folder, loader) for loader in loaders]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loader", action="append", choices=LOADERS)
    parser.add_argument("--case", action="append", choices=list(CASES))
    parser.add_argument("--lora-format", default=None)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("families", nargs="*", default=list(FAMILIES))
    args = parser.parse_args()
    loaders = args.loader or list(LOADERS)
    missing = {loader: available(loader) for loader in loaders if available(loader)}
    if missing:
        raise SystemExit("; ".join(f"{k}: {v}" for k, v in missing.items()))
    work = args.work or Path(tempfile.mkdtemp(prefix="webui-check-"))
    for family in args.families:
        for case in args.case or ["lora"]:
            for result in check(family, case, loaders, work, args.lora_format):
                print(family, case, json.dumps(result)[:600], flush=True)


if __name__ == "__main__":
    main()
