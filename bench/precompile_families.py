"""Dynamo's saved block graphs (training/speed/precompile.py, on by default for CUDA runs) on every
family's tiny model on a GPU: does each family save, load, and train to the same losses?

Per family, four fresh processes on one studio home of its own (its Inductor cache and saved
graphs), each training STEPS steps at batch 1 through the engine's loop (`loop.train`, the CLI's
path) with `compile: on` on CUDA:
  eager     compile off (the reference losses)
  off       LORASTUDIO_PRECOMPILE=0 (the ordinary regional compile; fills Inductor's cache)
  on-save   LORASTUDIO_PRECOMPILE=1 (traces with aot_compile and saves)
  on-load   LORASTUDIO_PRECOMPILE=1 (loads what on-save wrote)
Per run: each step's loss, the first step's seconds and the saved graphs' counters (hit, saved,
fallback, guard_miss). A family passes when on-save saved, on-load hit with no fallback, and the
three compiled runs' losses equal each other to `--tol` and the eager run's to `--eager-tol`.
The real-size measure of the same (first-step seconds) is bench/precompile_first_step.py's.

  python -m bench.precompile_families ROOT [--families flux,sdxl] [--steps 3] [--jobs 5] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

RUNS = [("eager", "0", "off"), ("off", "0", "on"), ("on-save", "1", "on"), ("on-load", "1", "on")]


def _folders(root: Path, family: str) -> tuple[Path, Path, Path]:
    base = root / family
    return base / "model", base / "data", base / "home"


def prepare(root: Path, family: str) -> None:
    """The family's tiny pipeline folder and its dataset (with control/ images for an edit family)."""
    from PIL import Image, ImageOps

    from lorastudio import families
    from lorastudio.tiny import build_tiny_pipeline, make_sample_dataset

    model, data, home = _folders(root, family)
    home.mkdir(parents=True, exist_ok=True)
    if not model.is_dir():
        build_tiny_pipeline(family, 0).save_pretrained(model)
    if not data.is_dir():
        make_sample_dataset(data, 0)
        if families.get(family).spec.edit_model:  # each target's control: its colour inverse
            (data / "control").mkdir()
            for img in sorted(data.glob("*.png")):
                with Image.open(img) as image:
                    ImageOps.invert(image.convert("RGB")).save(data / "control" / img.name)


def run_config(
    root: Path, family: str, tag: str, steps: int, compile_mode: str, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    from lorastudio import families

    spec = families.get(family).spec
    model, data, _ = _folders(root, family)
    raw: dict[str, Any] = {
        "family": family,
        "base_model": str(model),
        "data_dir": str(data),
        "output_name": f"pc-{tag}",
        "resolution": max(64, 2 * spec.resolution_multiple),
        "steps": steps,
        "learning_rate": 5e-3,
        "lora_rank": 4,
        "batch_size": 1,
        "seed": 0,
        "compile": compile_mode,
        "save_every": steps,
    }
    if "max_sequence_length" in spec.supports:
        raw["max_sequence_length"] = 16
    if spec.control_sizing is not None and (data / "control").is_dir():
        raw["control_resolution"] = "target"
    raw.update(extra or {})
    return raw


class _Notes(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith(
            ("lorastudio.training.speed.precompile", "lorastudio.training.speed.first_step_report")
        ):
            self.lines.append(record.getMessage()[:400])


def child(
    root: Path, family: str, tag: str, steps: int, compile_mode: str, device: str, extra: dict[str, Any]
) -> dict[str, Any]:
    """One run in this process (a fresh one per run: the saved graphs load across processes)."""
    import shutil

    from lorastudio.config import TrainConfig
    from lorastudio.training import loop

    _, _, home = _folders(root, family)
    shutil.rmtree(home / "outputs" / f"pc-{tag}", ignore_errors=True)
    notes = _Notes()
    logging.getLogger().addHandler(notes)
    logging.getLogger().setLevel(logging.INFO)
    losses: list[float] = []
    first: list[float] = []
    t0 = time.monotonic()

    def sink(event: Any) -> None:
        if event.type == "progress":
            losses.append(float(event.loss))
            if not first:
                first.append(time.monotonic() - t0)

    config = TrainConfig.model_validate(run_config(root, family, tag, steps, compile_mode, extra))
    loop.train(config, sink, device=device)
    saved = sys.modules.get("lorastudio.training.speed.precompile")
    counters = dict(saved.COUNTERS) if saved is not None else {}
    return {
        "losses": losses,
        "set": extra,
        "adapter": config.adapter,
        "first_step_s": round(first[0], 2) if first else None,
        "counters": counters,
        "notes": notes.lines,
    }


def child_command(
    root: Path, family: str, tag: str, steps: int, compile_mode: str, device: str, sets: list[str]
) -> list[str]:
    """The child process's command line for one run: every --set item travels with it."""
    cmd = [sys.executable, "-m", "bench.precompile_families", "child", str(root), "--families", family]
    cmd += ["--tag", tag, "--steps", str(steps), "--compile", compile_mode, "--device", device]
    for item in sets:
        cmd += ["--set", item]
    return cmd


def run_family(
    root: Path, family: str, steps: int, timeout_s: float, device: str, sets: list[str]
) -> dict[str, Any]:
    result: dict[str, Any] = {"family": family, "runs": {}}
    _, _, home = _folders(root, family)
    for tag, flag, compile_mode in RUNS:
        env = {**os.environ, "LORASTUDIO_HOME": str(home), "LORASTUDIO_PRECOMPILE": flag}
        cmd = child_command(root, family, tag, steps, compile_mode, device, sets)
        t = time.monotonic()
        try:
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            result["runs"][tag] = {"error": f"over {timeout_s} s"}
            continue
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        row = json.loads(lines[-1]) if lines else {"error": (out.stderr or out.stdout)[-1500:]}
        row["wall_s"] = round(time.monotonic() - t, 1)
        result["runs"][tag] = row
    return result


def verdict(result: dict[str, Any], tol: float, eager_tol: float) -> list[str]:
    """What is wrong with one family's runs (empty: it passes)."""
    runs = result.get("runs", {})
    if "error" in result:
        return [result["error"]]
    wrong = [f"{tag}: {row['error'][-300:]}" for tag, row in runs.items() if "error" in row]
    if wrong:
        return wrong
    save, load = runs["on-save"]["counters"], runs["on-load"]["counters"]
    if not save.get("saved"):
        wrong.append(f"on-save saved nothing: {save}")
    if not load.get("hit") or load.get("fallback") or load.get("saved"):
        wrong.append(f"on-load did not load cleanly: {load}")
    ref = runs["off"]["losses"]
    for tag in ("on-save", "on-load"):
        diff = max((abs(a - b) for a, b in zip(ref, runs[tag]["losses"], strict=True)), default=0.0)
        if diff > tol:
            wrong.append(f"{tag} losses differ from off by {diff:.2e}")
    diff = max((abs(a - b) for a, b in zip(runs["eager"]["losses"], ref, strict=True)), default=0.0)
    if diff > eager_tol:
        wrong.append(f"compiled losses differ from eager by {diff:.2e}")
    return wrong


def _sets(items: list[str]) -> dict[str, Any]:
    """--set KEY=VALUE items as config entries (VALUE parsed as JSON when it parses)."""
    out: dict[str, Any] = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.precompile_families", description=__doc__.split("\n")[0]
    )
    p.add_argument("what", nargs="?", choices=["all", "child"], default="all")
    p.add_argument("root", type=Path)
    p.add_argument("--families", default=None, help="comma-separated (default: every registered family)")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--jobs", type=int, default=5, help="families at once (one GPU; tiny models)")
    p.add_argument("--timeout-s", type=float, default=300.0, help="one run's limit")
    p.add_argument("--tol", type=float, default=1e-5)
    p.add_argument("--eager-tol", type=float, default=1e-3)
    p.add_argument("--tag", default="off")
    p.add_argument("--compile", default="on")
    p.add_argument("--device", default="cuda", help="cuda (the measure) or cpu (the plumbing)")
    p.add_argument("--set", action="append", default=[], help="KEY=VALUE (JSON when it parses) for every run")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.what == "child":
        row = child(
            args.root.resolve(),
            args.families,
            args.tag,
            args.steps,
            args.compile,
            args.device,
            _sets(args.set),
        )
        print(json.dumps(row), flush=True)
        return 0
    from lorastudio import families

    names = args.families.split(",") if args.families else list(families.names())
    root = args.root.resolve()
    prepared: dict[str, str] = {}  # family -> why it could not be prepared
    for name in names:  # one at a time: diffusers' and transformers' lazy imports race in threads
        try:
            prepare(root, name)
        except Exception as exc:  # noqa: BLE001 - a bench reports every family's failure and goes on
            prepared[name] = f"prepare: {type(exc).__name__}: {exc}"
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(
            pool.map(
                lambda f: run_family(root, f, args.steps, args.timeout_s, args.device, args.set),
                [name for name in names if name not in prepared],
            )
        )
    results += [{"family": name, "runs": {}, "error": why} for name, why in prepared.items()]
    failed = 0
    for result in results:
        wrong = verdict(result, args.tol, args.eager_tol)
        failed += bool(wrong)
        runs = result.get("runs", {})
        firsts = " ".join(f"{t} {r.get('first_step_s')}s" for t, r in runs.items() if "error" not in r)
        load = runs.get("on-load", {}).get("counters", {})
        print(
            f"{result['family']:16s} {'FAIL' if wrong else 'ok  '} first step: {firsts} | load {load}",
            flush=True,
        )
        for line in wrong:
            print(f"    {line}", flush=True)
        result["verdict"] = wrong
    for folder in (root, args.out):
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "precompile-families.json").write_text(json.dumps(results, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
